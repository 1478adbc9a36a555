package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
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
	// And pinfold's command line: the operator's session ls and diff.
	pf := func(args ...string) string {
		cmd := exec.Command(filepath.Join(bin, "pinfold"), args...)
		cmd.Env = append(os.Environ(), "PINFOLD_STORE="+ts.store)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("pinfold %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := pf("session", "ls", "--all", "--tenant", "agents"); !strings.Contains(out, id) {
		t.Errorf("session ls --tenant agents:\n%s", out)
	}
	if out := pf("diff", sb.Changeset); !strings.Contains(out, "alpha") {
		t.Errorf("pinfold diff %s:\n%s", sb.Changeset, out)
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
		for _, e := range ents {
			b, _ := os.ReadFile(filepath.Join(ts.store, "sessions", e.Name(), "session.json"))
			t.Logf("left: %s", b)
		}
	}
	if ws, _ := filepath.Glob(filepath.Join(server.TenantsDir(ts.store), "agents", "ws-*")); len(ws) != 0 {
		t.Errorf("%d tenant workspaces left", len(ws))
	}
	if n := mounts(); n != before {
		t.Errorf("%d mounts of the store left", n-before)
	}
	// A supervisor records its end, then exits: it may take a moment.
	var left []string
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		left = nil
		if b, err := exec.Command("pgrep", "-f", "__session-supervise").Output(); err == nil {
			for _, pid := range strings.Fields(string(b)) {
				if env, _ := os.ReadFile("/proc/" + pid + "/environ"); bytes.Contains(env, []byte(ts.store)) {
					left = append(left, pid)
				}
			}
		}
		if len(left) == 0 || time.Now().After(end) {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("supervisors of the test's store still run: %v", left)
	}
}

// TestE2BErrors: what pinfold refuses of E2B's protocol is refused in
// E2B's error shape with pinfold's code, and tenants stay apart.
func TestE2BErrors(t *testing.T) {
	tokA, tokB := "token-of-e2b-tenant-a-0123456789", "token-of-e2b-tenant-b-0123456789"
	pol := filepath.Join(t.TempDir(), "policy.json")
	os.WriteFile(pol, []byte(`{"templates": {"base": {}}}`), 0o600)
	p, err := server.ReadPolicy(pol)
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, server.Config{Tokens: map[string]string{tokA: "a", tokB: "b"}, Policy: p})
	call := func(method, path, body string, hdr ...string) (int, map[string]any, http.Header) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.tcp+path, strings.NewReader(body))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		json.Unmarshal(b, &m)
		return resp.StatusCode, m, resp.Header
	}
	pf := func(m map[string]any) string { s, _ := m["pinfoldCode"].(string); return s }
	if st, m, _ := call("GET", "/v2/sandboxes", ""); st != 401 || m["code"] != float64(401) || pf(m) != "PF193" {
		t.Errorf("no key: %d %v", st, m)
	}
	if st, m, _ := call("POST", "/v2/sandboxes", `{"templateID":"gpu"}`, "X-API-KEY", tokA); st != 403 || pf(m) != "PF189" {
		t.Errorf("a template not granted: %d %v", st, m)
	}
	if st, m, _ := call("POST", "/v2/sandboxes", `{"templateID":"base","volumeMounts":[{"name":"v","path":"/v"}]}`, "X-API-KEY", tokA); st != 501 || pf(m) != "PF158" {
		t.Errorf("volume mounts: %d %v", st, m)
	}
	st, m, _ := call("POST", "/v2/sandboxes", `{"templateID":"base","timeout":60}`, "X-API-KEY", tokA)
	if st != 201 || m["envdAccessToken"] == "" {
		t.Fatalf("create: %d %v", st, m)
	}
	id, access := m["sandboxID"].(string), m["envdAccessToken"].(string)
	defer call("DELETE", "/sandboxes/"+id, "", "X-API-KEY", tokA)
	if st, m, _ := call("POST", "/sandboxes/"+id+"/fork", `{}`, "X-API-KEY", tokA); st != 501 || pf(m) != "PF158" {
		t.Errorf("fork: %d %v", st, m)
	}
	// Tenant b sees nothing of a's sandbox, on either plane.
	if st, m, _ := call("GET", "/sandboxes/"+id, "", "X-API-KEY", tokB); st != 404 || m["code"] != float64(404) {
		t.Errorf("b's info of a's sandbox: %d %v", st, m)
	}
	stat := `{"path":"/"}`
	if st, _, _ := call("POST", "/filesystem.Filesystem/Stat", stat, "X-API-KEY", tokB, "E2b-Sandbox-Id", id, "Content-Type", "application/json"); st != 502 {
		t.Errorf("b's Stat in a's sandbox: %d", st)
	}
	if st, _, _ := call("POST", "/filesystem.Filesystem/Stat", stat, "X-Access-Token", "wrong", "E2b-Sandbox-Id", id, "Content-Type", "application/json"); st != 401 {
		t.Errorf("a wrong access token: %d", st)
	}
	if st, m, _ := call("POST", "/filesystem.Filesystem/Stat", stat, "X-Access-Token", access, "E2b-Sandbox-Id", id, "Content-Type", "application/json"); st != 200 || m["entry"] == nil {
		t.Errorf("Stat with the access token: %d %v", st, m)
	}
	// A sandbox's access token opens its own plane only: not the
	// tenant's control plane (list, create, kill, connect to another).
	for _, c := range [][2]string{{"GET", "/v2/sandboxes"}, {"POST", "/v2/sandboxes"}, {"GET", "/sandboxes/" + id},
		{"POST", "/sandboxes/" + id + "/connect"}, {"DELETE", "/sandboxes/" + id}} {
		if st, m, _ := call(c[0], c[1], `{"templateID":"base"}`, "X-Access-Token", access, "E2b-Sandbox-Id", id, "Content-Type", "application/json"); st != 401 {
			t.Errorf("%s %s with a sandbox's access token: %d %v", c[0], c[1], st, m)
		}
	}
	if st, m, _ := call("POST", "/filesystem.Filesystem/CreateWatcher", stat, "X-Access-Token", access, "E2b-Sandbox-Id", id, "Content-Type", "application/json"); st != 501 || m["code"] != "unimplemented" {
		t.Errorf("an RPC pinfold does not serve: %d %v", st, m)
	}
	// E2B's timeout ends a sandbox, as E2B's does.
	st, m, _ = call("POST", "/v2/sandboxes", `{"templateID":"base","timeout":1}`, "X-API-KEY", tokA)
	if st != 201 {
		t.Fatalf("create: %d %v", st, m)
	}
	short := m["sandboxID"].(string)
	for end := time.Now().Add(30 * time.Second); ; {
		st, _, _ := call("GET", "/sandboxes/"+short, "", "X-API-KEY", tokA)
		if st == 404 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("a sandbox of timeout 1 s still answers %d after 30 s", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A stream ends with its end envelope, here carrying the error.
	req, _ := http.NewRequest("POST", ts.tcp+"/process.Process/Connect", bytes.NewReader(append([]byte{0, 0, 0, 0, 21}, `{"process":{"pid":9}}`...)))
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("X-Access-Token", access)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(b) < 5 || b[0] != 2 || !strings.Contains(string(b), "not_found") {
		t.Errorf("Connect to no process: %d %q", resp.StatusCode, b)
	}
}
