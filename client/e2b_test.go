package client_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/client"
	"github.com/pinfold/pinfold/internal/server"
)

// e2bNodeDir is where scripts/test-setup.sh installs e2b@2.51.0.
const e2bNodeDir = "/var/cache/pinfold-tools/e2b-node"

// e2bSDK finds node and E2B's SDK: missing, the test fails on CI and
// skips elsewhere.
func e2bSDK(t *testing.T) (node, dir string) {
	t.Helper()
	dir = e2bNodeDir
	if d := os.Getenv("PINFOLD_E2B_NODE_DIR"); d != "" {
		dir = d
	}
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "node_modules", "e2b", "package.json"))
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("node or e2b@2.51.0 in %s missing (scripts/test-setup.sh installs them): %v", dir, err)
		}
		t.Skipf("node or e2b@2.51.0 in %s missing (scripts/test-setup.sh installs them): %v", dir, err)
	}
	if os.Geteuid() != 0 {
		t.Skip("pausing needs root (the cgroup freezer)")
	}
	return node, filepath.Join(dir, "node_modules")
}

// e2bServer serves pinfold's API on TCP with one tenant whose policy has
// E2B's default template, "base".
func e2bServer(t *testing.T) (*testServer, string) {
	t.Helper()
	tok := "token-of-the-e2b-tenant-0123456789"
	pol := filepath.Join(t.TempDir(), "policy.json")
	os.WriteFile(pol, []byte(`{"templates": {"base": {}}, "limits": {"pids": "256"}}`), 0o600)
	p, err := server.ReadPolicy(pol)
	if err != nil {
		t.Fatal(err)
	}
	return startServer(t, server.Config{Tokens: map[string]string{tok: "agents"}, Policy: p}), tok
}

// runSDK runs testdata/e2b/sdk.mjs with args against ts.
func runSDK(t *testing.T, ts *testServer, tok string, timeout time.Duration, args ...string) string {
	t.Helper()
	node, mods := e2bSDK(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{"testdata/e2b/sdk.mjs"}, args...)...)
	cmd.Env = append(os.Environ(), "E2B_API_URL="+ts.tcp, "E2B_SANDBOX_URL="+ts.tcp, "E2B_API_KEY="+tok,
		"E2B_NODE_DIR="+filepath.Dir(mods), "E2B_DEBUG=")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("sdk.mjs %v:\n%s", args, out.String())
	if err != nil {
		t.Fatalf("sdk.mjs %v: %v", args, err)
	}
	return out.String()
}

// TestE2BSDK runs E2B's own SDK, unmodified, against pinfold serve: what
// agent frameworks do, then the writes reviewed with pinfold's API.
func TestE2BSDK(t *testing.T) {
	ts, tok := e2bServer(t)
	out := runSDK(t, ts, tok, 3*time.Minute, "functions")
	_, after, ok := strings.Cut(out, "session ")
	if !ok {
		t.Fatal("no session printed")
	}
	id := strings.Fields(after)[0]
	// The killed sandbox's writes in its workspace are a changeset that
	// pinfold's own API reviews.
	c, err := client.New(ts.tcp, client.WithToken(tok))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb, err := c.Get(ctx, id)
	if err != nil || sb.State != "stopped" || sb.Changeset == "" {
		t.Fatalf("the E2B sandbox as a session: %+v %v", sb, err)
	}
	diff, err := c.Diff(ctx, id, "")
	if err != nil || !strings.Contains(diff, "notes/a.txt") || !strings.Contains(diff, "alpha") {
		t.Fatalf("its changeset: %q %v", diff, err)
	}
	if err := c.Discard(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// TestE2BLoad creates, uses and kills 100 sandboxes through the SDK, 20 at
// once: no failure, and nothing left (records, processes, mounts).
func TestE2BLoad(t *testing.T) {
	ts, tok := e2bServer(t)
	mounts := func() int {
		b, _ := os.ReadFile("/proc/self/mountinfo")
		return strings.Count(string(b), ts.store)
	}
	before := mounts()
	runSDK(t, ts, tok, 8*time.Minute, "load", "100", "20")
	ents, _ := os.ReadDir(filepath.Join(ts.store, "sessions"))
	if len(ents) != 0 {
		t.Errorf("%d session records left", len(ents))
	}
	if n := mounts(); n != before {
		t.Errorf("%d mounts of the store left", n-before)
	}
	if b, err := exec.Command("pgrep", "-f", "__session-supervise").Output(); err == nil {
		for _, pid := range strings.Fields(string(b)) {
			if env, _ := os.ReadFile("/proc/" + pid + "/environ"); bytes.Contains(env, []byte(ts.store)) {
				t.Errorf("a supervisor of the test's store still runs: %s", pid)
			}
		}
	}
}
