package client_test

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/client"
	"github.com/pinfold/pinfold/internal/server"
)

const tenantToken = "token-of-the-tenant-0123456789"

// tenant serves the API with one tenant over TCP loopback under the
// policy file's text ("" for none) and returns that tenant's client.
func tenant(t *testing.T, policy string) (*testServer, *client.Client) {
	t.Helper()
	cfg := server.Config{Tokens: map[string]string{tenantToken: "t"}}
	if policy != "" {
		path := filepath.Join(t.TempDir(), "policy.json")
		if err := os.WriteFile(path, []byte(policy), 0o600); err != nil {
			t.Fatal(err)
		}
		p, err := server.ReadPolicy(path)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Policy = p
	}
	ts := startServer(t, cfg)
	c, err := client.New(ts.tcp, client.WithToken(tenantToken))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The tenant's sessions are not the owner's: stop them here.
		if l, err := c.List(context.Background(), false); err == nil {
			for _, s := range l {
				c.Delete(context.Background(), s.ID)
			}
		}
	})
	return ts, c
}

// notGranted fails unless err is the API's 403 PF189 naming key in its fix.
func notGranted(t *testing.T, what string, err error, key string) {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 403 || ce.Code != "PF189" || !strings.Contains(ce.Fix, key) {
		t.Errorf("%s: %v, want 403 PF189 with a fix naming %q", what, err, key)
	}
}

func noSandboxes(t *testing.T, c *client.Client) {
	t.Helper()
	if l, err := c.List(context.Background(), true); err != nil || len(l) != 0 {
		t.Errorf("the refused requests left sandboxes: %+v %v", l, err)
	}
}

// TestTenantCannotNameHostBases: a tenant's base:dir:/ would show it every
// world-readable file of the host, and tar:PATH would have the server
// (root) unpack and serve an archive only root may read.
func TestTenantCannotNameHostBases(t *testing.T) {
	_, c := tenant(t, "")
	ctx := context.Background()
	dir := t.TempDir()
	archive := filepath.Join(dir, "x.tar")
	f, err := os.OpenFile(archive, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	tw.WriteHeader(&tar.Header{Name: "secret", Mode: 0o644, Size: 7})
	tw.Write([]byte("secret\n"))
	tw.Close()
	f.Close()
	for _, base := range []string{"dir:/", "tar:" + archive, "oci:" + archive, "dir:.", "dir:../../..", "debian-12"} {
		_, err := c.Create(ctx, client.CreateRequest{Base: base})
		notGranted(t, "base "+base, err, "bases")
	}
	noSandboxes(t, c)
}

// TestTenantCannotCopyServerEnv: env NAME copies the server's own
// variable into the sandbox; only NAME=VALUE, the tenant's own value,
// passes, unless the policy grants the name.
func TestTenantCannotCopyServerEnv(t *testing.T) {
	t.Setenv("PINFOLD_TEST_SERVER_SECRET", "s3cret")
	t.Setenv("PINFOLD_TEST_GRANTED", "granted")
	_, c := tenant(t, `{"env":["PINFOLD_TEST_GRANTED"]}`)
	ctx := context.Background()
	_, err := c.Create(ctx, client.CreateRequest{Env: []string{"PINFOLD_TEST_SERVER_SECRET"}})
	notGranted(t, "env of the server's variable", err, "env")
	noSandboxes(t, c)
	sb, err := c.Create(ctx, client.CreateRequest{Env: []string{"MINE=mine", "PINFOLD_TEST_GRANTED"}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Args: []string{"sh", "-c", "echo $MINE $PINFOLD_TEST_GRANTED $PINFOLD_TEST_SERVER_SECRET"}})
	if err != nil || res.Stdout != "mine granted\n" {
		t.Errorf("the sandbox's environment: %+v %v", res, err)
	}
}

// TestTenantCannotReachHostNetwork: network host would reach the
// host's loopback services, and dns 127.0.0.1:P would have the host
// send the sandbox's queries to a host port; neither is granted by
// default, and a dns server is refused even where allow mode is.
func TestTenantCannotReachHostNetwork(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	_, c := tenant(t, `{"networks":["none","allow"]}`)
	ctx := context.Background()
	_, err = c.Create(ctx, client.CreateRequest{Network: "host"})
	notGranted(t, "network host", err, "networks")
	_, err = c.Create(ctx, client.CreateRequest{Network: "outbound"})
	notGranted(t, "network outbound", err, "networks")
	_, err = c.Create(ctx, client.CreateRequest{Network: "allow", DNS: []string{u.LocalAddr().String()}})
	notGranted(t, "dns on the host's loopback", err, "dns")
	_, err = c.Create(ctx, client.CreateRequest{Network: "allow", Allow: []string{l.Addr().String(), "127.0.0.0/8"}})
	notGranted(t, "allow of the host's loopback", err, "allow")
	noSandboxes(t, c)
}

// TestTenantCannotPickBackend: docker and podman run their containers
// as host root (their daemon's); a tenant gets the native runtime unless
// the operator grants another.
func TestTenantCannotPickBackend(t *testing.T) {
	_, c := tenant(t, "")
	for _, b := range []string{"docker", "podman", "kubernetes", "auto", "host"} {
		_, err := c.Create(context.Background(), client.CreateRequest{Backend: b})
		notGranted(t, "backend "+b, err, "backends")
	}
	noSandboxes(t, c)
}

// TestTenantHostPorts: a tenant publishes on a port the kernel picks, or
// one of the policy's host_ports; never a port of its choosing that a
// host service may expect.
func TestTenantHostPorts(t *testing.T) {
	free := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	expected := free() // a port a host service means to take
	lo := free()
	_, c := tenant(t, `{"host_ports":{"from":`+strconv.Itoa(lo)+`,"to":`+strconv.Itoa(lo)+`}}`)
	ctx := context.Background()
	sb, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Publish(ctx, sb.ID, 8000, expected)
	notGranted(t, "host port "+strconv.Itoa(expected), err, "host_ports")
	if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(expected)); err != nil {
		t.Errorf("the refused port was taken: %v", err)
	} else {
		l.Close()
	}
	p, err := c.Publish(ctx, sb.ID, 8000, 0)
	if err != nil || p.Host != "127.0.0.1:"+strconv.Itoa(lo) {
		t.Errorf("host port 0 with host_ports %d-%d: %+v %v", lo, lo, p, err)
	}
	if p, err := c.Publish(ctx, sb.ID, 8001, lo); err == nil {
		t.Errorf("a second sandbox port on a taken host port: %+v", p)
	}
}

// TestTenantDefaultPort: without host_ports a tenant's port is one the
// kernel picks on 127.0.0.1.
func TestTenantDefaultPort(t *testing.T) {
	_, c := tenant(t, "")
	ctx := context.Background()
	sb, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Publish(ctx, sb.ID, 8000, 0)
	if err != nil || !strings.HasPrefix(p.Host, "127.0.0.1:") {
		t.Errorf("host port 0: %+v %v", p, err)
	}
	_, err = c.Publish(ctx, sb.ID, 8001, 1023)
	notGranted(t, "host port 1023", err, "host_ports")
}

// TestTenantLimits: a tenant's sandbox is bounded by the policy's limits
// when it asks nothing, and may not ask more.
func TestTenantLimits(t *testing.T) {
	_, c := tenant(t, `{"limits":{"memory":"256m","pids":64}}`)
	ctx := context.Background()
	for _, r := range []client.CreateRequest{{Memory: "1g"}, {Pids: "65"}, {Timeout: "25h"}, {IdleTimeout: "0"}, {Memory: "unlimited"}} {
		_, err := c.Create(ctx, r)
		notGranted(t, fmt.Sprintf("limits %+v", r), err, "limits.")
	}
	noSandboxes(t, c)
	sb, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// 64 processes and threads (the agent's among them): 5 start, 100 do not.
	for _, n := range []int{5, 100} { // in this order: the second leaves its processes
		ok := n == 5
		res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Args: []string{"sh", "-c",
			"for i in $(seq " + strconv.Itoa(n) + "); do sleep 30 & p=\"$p $!\"; done; kill $p"}})
		if err != nil {
			t.Fatal(err)
		}
		if (res.ExitCode == 0) != ok {
			t.Errorf("%d processes under pids 64: %+v", n, res)
		}
	}
}

// TestTenantConfigNotRun: a tenant writes a pinfold.yaml with a pre_run
// hook in its workspace, snapshots, stops, applies (the file lands in its
// workspace on the host) and starts a session from the snapshot: the
// server reads no configuration a tenant or sandbox can write, so the
// hook, which would run on the host as the server's user, never runs.
func TestTenantConfigNotRun(t *testing.T) {
	_, c := tenant(t, "")
	ctx := context.Background()
	marker := filepath.Join(t.TempDir(), "ran-on-the-host")
	yaml := "version: 1\npre_run: \"touch " + marker + "\"\nmounts: [\"/root:/r:ro\"]\nnetwork: host\n"
	sb, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, sb.ID, sb.Workspace+"/pinfold.yaml", 0o644, strings.NewReader(yaml)); err != nil {
		t.Fatal(err)
	}
	snap, err := c.Snapshot(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(ctx, sb.ID, false); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(sb.Workspace, "pinfold.yaml")); err != nil || string(b) != yaml {
		t.Fatalf("the tenant's pinfold.yaml was not applied: %q %v", b, err)
	}
	sb2, err := c.Create(ctx, client.CreateRequest{Snapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	// Nor did its other settings apply: no /root mounted.
	res, err := c.Exec(ctx, sb2.ID, client.ExecRequest{Args: []string{"sh", "-c", "cat pinfold.yaml >/dev/null && if [ -e /r ]; then echo mounted; else echo none; fi"}})
	if err != nil || res.Stdout != "none\n" {
		t.Errorf("exec in the session from the snapshot: %+v %v", res, err)
	}
	// The supervisor resolves the plan again from the request: give it
	// time to run a hook it should not.
	time.Sleep(200 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the tenant's pre_run hook ran on the host")
	}
	c.Delete(ctx, sb2.ID)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the tenant's pre_run hook ran on the host")
	}
}

// TestTenantTemplate: a template of the policy is what a tenant gets by
// naming it: its settings, the server variables it passes, granted to
// the requests that name it and to no other.
func TestTenantTemplate(t *testing.T) {
	t.Setenv("PINFOLD_TEST_TEMPLATE_VAR", "from-the-server")
	_, c := tenant(t, `{"templates":{"py":{"env":["SET_BY_TEMPLATE=yes","PINFOLD_TEST_TEMPLATE_VAR"],"limits":{"pids":"100"}}}}`)
	ctx := context.Background()
	_, err := c.Create(ctx, client.CreateRequest{Template: "nope"})
	notGranted(t, "an unknown template", err, "templates")
	_, err = c.Create(ctx, client.CreateRequest{Env: []string{"PINFOLD_TEST_TEMPLATE_VAR"}})
	notGranted(t, "a template's variable without the template", err, "env")
	noSandboxes(t, c)
	sb, err := c.Create(ctx, client.CreateRequest{Template: "py"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Args: []string{"sh", "-c", "echo $SET_BY_TEMPLATE $PINFOLD_TEST_TEMPLATE_VAR"}})
	if err != nil || res.Stdout != "yes from-the-server\n" {
		t.Errorf("the template's environment: %+v %v", res, err)
	}
}
