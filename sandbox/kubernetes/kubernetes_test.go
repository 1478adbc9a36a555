package kubernetes

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/internal/kube"
	"github.com/pinfold/pinfold/sandbox"
)

// TestRefusals checks what a pod cannot be given is refused before any
// cluster is asked (the helper is never found here).
func TestRefusals(t *testing.T) {
	t.Setenv("PINFOLD_KUBE_HELPER", "/nonexistent/pinfold-kube")
	t.Setenv("PINFOLD_KUBE_NETWORK_POLICY", "")
	t.Setenv("PINFOLD_KUBE_NETWORK_NONE", "netoff")
	rt := Default()
	ws := t.TempDir()
	img := sandbox.Base{Kind: sandbox.BaseOCI, Ref: "img:1"}
	for name, spec := range map[string]sandbox.Spec{
		"host base":      {Workspace: ws, Access: sandbox.AccessChangeset},
		"rw workspace":   {Base: img, Workspace: ws, Access: sandbox.AccessReadWrite},
		"image file":     {Base: sandbox.Base{Kind: sandbox.BaseOCI, Path: ws}},
		"rw mount":       {Base: img, Mounts: []sandbox.Mount{{Source: ws, Target: "/data"}}},
		"pids":           {Base: img, Limits: sandbox.Limits{Pids: 10}},
		"allow":          {Base: img, Network: sandbox.NetworkAllow, Net: sandbox.NetPolicy{Allow: []string{"192.0.2.1"}}},
		"outbound":       {Base: img, Network: sandbox.NetworkOutbound},
		"root":           {Base: img, Root: true},
		"host loopback":  {Base: img, Net: sandbox.NetPolicy{HostLoopback: true}},
		"publish":        {Base: img, Net: sandbox.NetPolicy{Publish: []string{"8080:80"}}},
		"capabilities":   {Base: img, Capabilities: []string{"CAP_NET_RAW"}},
		"scratch tmp":    {Base: img, Scratch: ws},
		"base writes":    {Base: img, BaseWrites: ws},
		"captures":       {Base: img, Captures: []sandbox.Capture{{Path: ws, Upper: ws, Work: ws}}},
		"bad hostname":   {Base: img, Hostname: "Not_A_Label"},
		"no such helper": {Base: img},
	} {
		t.Run(name, func(t *testing.T) {
			if spec.Access == sandbox.AccessChangeset {
				spec.Changeset = &sandbox.Capture{Upper: ws, Work: ws}
			}
			_, err := rt.New(context.Background(), spec)
			var ue *sandbox.UnsupportedError
			var se *sandbox.SpecError
			var ce *sandbox.CheckError
			switch {
			case err == nil:
				t.Fatalf("accepted")
			case name == "bad hostname" && !errors.As(err, &se):
				t.Errorf("want a SpecError, got %v", err)
			case name == "no such helper" && !errors.As(err, &ce):
				t.Errorf("want a CheckError, got %v", err)
			case name != "bad hostname" && name != "no such helper" && !errors.As(err, &ue):
				t.Errorf("want an UnsupportedError, got %v", err)
			}
		})
	}
	t.Setenv("PINFOLD_KUBE_NETWORK_POLICY", "enforced")
	t.Setenv("PINFOLD_KUBE_NETWORK_NONE", "")
	if f := Default().Features(); !slices.Contains(f.Networks, sandbox.NetworkAllow) || !slices.Contains(f.Networks, sandbox.NetworkNone) {
		t.Errorf("a cluster that enforces policies offers no network none or allow: %v", f.Networks)
	}
}

// TestRefusalsSayWhy: a refusal names what would be accepted: an oci:REF
// base for the default (host) base, and for network none and allow what
// the cluster needs. Network none is not offered by default: a pod that
// passes Pod Security "restricted" is off the network only by a policy
// the cluster's plugin enforces.
func TestRefusalsSayWhy(t *testing.T) {
	t.Setenv("PINFOLD_KUBE_HELPER", "/nonexistent/pinfold-kube")
	t.Setenv("PINFOLD_KUBE_NETWORK_POLICY", "")
	t.Setenv("PINFOLD_KUBE_NETWORK_NONE", "")
	img := sandbox.Base{Kind: sandbox.BaseOCI, Ref: "img:1"}
	for name, c := range map[string]struct {
		spec sandbox.Spec
		want []string
	}{
		"no base":      {sandbox.Spec{}, []string{"--base oci:REF"}},
		"debian-12":    {sandbox.Spec{Base: sandbox.Base{Kind: sandbox.BaseDebian12}}, []string{"--base oci:REF"}},
		"network none": {sandbox.Spec{Base: img, Network: sandbox.NetworkNone}, []string{"PINFOLD_KUBE_NETWORK_POLICY=enforced", "PINFOLD_KUBE_NETWORK_NONE=netoff", "privileged"}},
		"allow":        {sandbox.Spec{Base: img, Network: sandbox.NetworkAllow, Net: sandbox.NetPolicy{Allow: []string{"192.0.2.1"}}}, []string{"PINFOLD_KUBE_NETWORK_POLICY=enforced"}},
	} {
		_, err := Default().New(context.Background(), c.spec)
		var ue *sandbox.UnsupportedError
		if !errors.As(err, &ue) {
			t.Errorf("%s: want an UnsupportedError, got %v", name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(ue.Fix, w) {
				t.Errorf("%s: the fix %q does not say %q", name, ue.Fix, w)
			}
		}
	}
}

// TestAbsKubeconfig: a relative PINFOLD_KUBECONFIG names the file in the
// directory pinfold started in, also for what it starts elsewhere (a
// session's supervisor runs in /).
func TestAbsKubeconfig(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("PINFOLD_KUBECONFIG", "kc")
	t.Setenv("KUBECONFIG", "a:/b")
	AbsEnv()
	if got := os.Getenv("PINFOLD_KUBECONFIG"); got != filepath.Join(dir, "kc") {
		t.Errorf("PINFOLD_KUBECONFIG=%s", got)
	}
	if got := os.Getenv("KUBECONFIG"); got != filepath.Join(dir, "a")+":/b" {
		t.Errorf("KUBECONFIG=%s", got)
	}
	if rt := New(Options{Kubeconfig: "x"}); rt.opt.Kubeconfig != filepath.Join(dir, "x") {
		t.Errorf("Options.Kubeconfig: %s", rt.opt.Kubeconfig)
	}
}

func TestEgress(t *testing.T) {
	np := &sandbox.NetPolicy{Allow: []string{"192.0.2.7", "10.0.0.0/8", "localhost", "198.51.100.0/24"},
		Deny: []string{"10.1.0.0/16", "198.51.100.0/23"}}
	blocks, hosts, err := egress(context.Background(), np)
	if err != nil {
		t.Fatal(err)
	}
	want := []kube.Block{{CIDR: "192.0.2.7/32"}, {CIDR: "10.0.0.0/8", Except: []string{"10.1.0.0/16"}}, {CIDR: "127.0.0.1/32"}}
	if len(blocks) < len(want) {
		t.Fatalf("got %+v, want %+v", blocks, want)
	}
	for i, w := range want {
		if blocks[i].CIDR != w.CIDR || !slices.Equal(blocks[i].Except, w.Except) {
			t.Errorf("block %d: got %+v, want %+v", i, blocks[i], w)
		}
	}
	for _, b := range blocks {
		if b.CIDR == "198.51.100.0/24" {
			t.Errorf("a denied range is allowed: %+v", blocks)
		}
	}
	if len(hosts) != 1 || hosts[0].Name != "localhost" || !slices.Contains(hosts[0].Addrs, "127.0.0.1") {
		t.Errorf("hosts: %+v", hosts)
	}
	if _, _, err := egress(context.Background(), &sandbox.NetPolicy{Allow: []string{"*.example.org"}}); err == nil {
		t.Errorf("a wildcard was accepted")
	}
	// "tcp:NAME" (any protocol to NAME's addresses) is NAME to a
	// NetworkPolicy, which holds addresses only.
	_, hosts, err = egress(context.Background(), &sandbox.NetPolicy{Allow: []string{"tcp:localhost"}})
	if err != nil || len(hosts) != 1 || hosts[0].Name != "localhost" {
		t.Errorf("tcp:localhost: %+v %v", hosts, err)
	}
}
