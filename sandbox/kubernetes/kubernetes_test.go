package kubernetes

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/pinfold/pinfold/internal/kube"
	"github.com/pinfold/pinfold/sandbox"
)

// TestRefusals checks what a pod cannot be given is refused before any
// cluster is asked (the helper is never found here).
func TestRefusals(t *testing.T) {
	t.Setenv("PINFOLD_KUBE_HELPER", "/nonexistent/pinfold-kube")
	t.Setenv("PINFOLD_KUBE_NETWORK_POLICY", "")
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
	if f := Default().Features(); !slices.Contains(f.Networks, sandbox.NetworkAllow) {
		t.Errorf("a cluster that enforces policies offers no network allow: %v", f.Networks)
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
