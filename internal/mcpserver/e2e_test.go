package mcpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pinfold/pinfold/internal/nettest"
	"github.com/pinfold/pinfold/internal/session"
)

// pinfold is the binary the tests run, built with pinfold-api beside it.
var pinfold string

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("skipping: pinfold mcp's tests run real sandboxes, as root")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "pinfold-mcp-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Chmod(dir, 0o755)
	if pinfold, err = nettest.BuildPinfold(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// workspace makes a workspace with a.txt and, if yaml is given, a
// pinfold.yaml.
func workspace(t *testing.T, yaml string) string {
	t.Helper()
	ws := t.TempDir()
	os.Chmod(ws, 0o755)
	if err := os.WriteFile(filepath.Join(ws, "a.txt"), []byte("one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if yaml != "" {
		if err := os.WriteFile(filepath.Join(ws, "pinfold.yaml"), []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return ws
}

// storeDir is a store for a test. pinfold empties an applied or
// discarded changeset's trash in the background, which may still be at
// work when the test ends: the directory is removed once it is done.
func storeDir(t *testing.T) string {
	dir := t.TempDir()
	t.Cleanup(func() {
		for range 100 {
			if os.RemoveAll(dir) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return dir
}

// stopAll stops, when the test ends, what sessions of the store's owner
// and tenants the test left running (it stops each it starts, unless it
// failed half-way): sessions outlive their servers.
func stopAll(t *testing.T, store string) {
	t.Cleanup(func() {
		st := session.Open(store)
		for _, tenant := range []string{"", "agent", "other"} {
			list, _ := st.List(tenant)
			for _, r := range list {
				if r.Live() {
					session.Stop(context.Background(), st, r, 5*time.Second)
				}
			}
		}
	})
}

// stdio connects the Go SDK's client to a real `pinfold mcp` in ws.
func stdio(t *testing.T, store, ws string) *mcp.ClientSession {
	t.Helper()
	stopAll(t, store)
	cmd := exec.Command(pinfold, "mcp")
	cmd.Dir = ws
	cmd.Env = append(os.Environ(), "PINFOLD_STORE="+store)
	cmd.Stderr = os.Stderr
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to pinfold mcp: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func tools(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	return names
}

// call calls a tool; out, if not nil, receives its structured content.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if out != nil && res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

type sess struct {
	ID, State, Changeset string
}

// useSession is what an agent does in a session: write a file, run a
// command that reads it and writes another, list and read, stop, and
// look at the diff. It returns the session's id.
func useSession(t *testing.T, cs *mcp.ClientSession) string {
	t.Helper()
	var s sess
	if res := call(t, cs, "session_start", map[string]any{}, &s); res.IsError || s.ID == "" || s.State != "running" {
		t.Fatalf("session_start: %s", text(res))
	}
	// Stopped even when the test fails half-way: sessions outlive it.
	t.Cleanup(func() {
		cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "session_stop", Arguments: map[string]any{"session": s.ID}})
	})
	if res := call(t, cs, "file_write", map[string]any{"session": s.ID, "path": "notes/hello.txt", "content": "hello from the agent\n"}, nil); res.IsError {
		t.Fatalf("file_write: %s", text(res))
	}
	var x struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
	}
	res := call(t, cs, "session_exec", map[string]any{"session": s.ID, "command": []string{"sh", "-c", "cat notes/hello.txt; cat; echo made > made.txt"}, "stdin": "in\n"}, &x)
	if res.IsError || x.ExitCode != 0 || x.Stdout != "hello from the agent\nin\n" {
		t.Errorf("session_exec: %+v %s", x, text(res))
	}
	res = call(t, cs, "session_exec", map[string]any{"session": s.ID, "command": []string{"sh", "-c", "exit 7"}}, &x)
	if !res.IsError || x.ExitCode != 7 {
		t.Errorf("session_exec exit 7: %+v %s", x, text(res))
	}
	var dir struct{ Entries []struct{ Name, Type string } }
	call(t, cs, "file_list", map[string]any{"session": s.ID, "path": "."}, &dir)
	var names []string
	for _, e := range dir.Entries {
		names = append(names, e.Name)
	}
	for _, want := range []string{"made.txt", "notes"} {
		if !slices.Contains(names, want) {
			t.Errorf("file_list: no %s in %q", want, names)
		}
	}
	var f struct{ Content string }
	if call(t, cs, "file_read", map[string]any{"session": s.ID, "path": "notes/hello.txt"}, &f); f.Content != "hello from the agent\n" {
		t.Errorf("file_read: %q", f.Content)
	}
	if res := call(t, cs, "file_read", map[string]any{"session": s.ID, "path": "missing"}, nil); !res.IsError {
		t.Errorf("file_read of a missing file: %s", text(res))
	}
	// An endless file is cut at the bound, not read into the server's
	// memory.
	if res := call(t, cs, "file_read", map[string]any{"session": s.ID, "path": "/dev/zero"}, nil); !res.IsError || !strings.Contains(text(res), "MiB") {
		t.Errorf("file_read of /dev/zero: %.200s", text(res))
	}
	if res := call(t, cs, "session_stop", map[string]any{"session": s.ID}, &s); res.IsError || s.State == "running" {
		t.Errorf("session_stop: %s", text(res))
	}
	var d struct{ Diff string }
	call(t, cs, "diff", map[string]any{"session": s.ID}, &d)
	for _, want := range []string{"notes/hello.txt", "+hello from the agent", "made.txt", "+made"} {
		if !strings.Contains(d.Diff, want) {
			t.Errorf("diff lacks %q:\n%s", want, d.Diff)
		}
	}
	return s.ID
}

// TestStdio drives a real `pinfold mcp` with the Go SDK's client: the
// tools, a session's writes in its changeset's diff and not in the
// workspace, a one-shot run, apply not offered, and a run pinfold.yaml
// refuses.
func TestStdio(t *testing.T) {
	store := storeDir(t)
	ws := workspace(t, "")
	cs := stdio(t, store, ws)
	want := []string{"diff", "file_list", "file_read", "file_write", "run", "session_exec", "session_list", "session_start", "session_stop"}
	if got := tools(t, cs); !slices.Equal(got, want) {
		t.Errorf("tools: %q, want %q (no apply or discard without mcp.apply)", got, want)
	}
	var live sess
	call(t, cs, "session_start", map[string]any{"name": "agent"}, &live)
	t.Cleanup(func() {
		cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "session_stop", Arguments: map[string]any{"session": "agent"}})
	})
	ls := exec.Command(pinfold, "session", "ls")
	ls.Dir, ls.Env = ws, append(os.Environ(), "PINFOLD_STORE="+store)
	if out, err := ls.CombinedOutput(); err != nil || live.ID == "" || !strings.Contains(string(out), live.ID) {
		t.Errorf("pinfold session ls: %v\n%s", err, out)
	}
	call(t, cs, "session_stop", map[string]any{"session": "agent"}, nil)
	id := useSession(t, cs)
	if _, err := os.Stat(filepath.Join(ws, "notes")); err == nil {
		t.Error("a session's write reached the workspace")
	}
	if res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "apply", Arguments: map[string]any{"session": id}}); err == nil && !res.IsError {
		t.Error("apply was called without mcp.apply")
	}
	// The changeset is pinfold's own: the CLI sees it.
	cmd := exec.Command(pinfold, "changes")
	cmd.Dir, cmd.Env = ws, append(os.Environ(), "PINFOLD_STORE="+store)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "session "+id) {
		t.Errorf("pinfold changes: %v\n%s", err, out)
	}

	var r struct {
		ExitCode  int    `json:"exit_code"`
		Stdout    string `json:"stdout"`
		Changeset struct{ ID string }
	}
	res := call(t, cs, "run", map[string]any{"command": []string{"sh", "-c", "echo ran > run.txt; cat a.txt; exit 3"}}, &r)
	if !res.IsError || r.ExitCode != 3 || r.Stdout != "one\n" || r.Changeset.ID == "" {
		t.Errorf("run: %+v %s", r, text(res))
	}
	var d struct{ Diff string }
	if call(t, cs, "diff", map[string]any{"changeset": r.Changeset.ID}, &d); !strings.Contains(d.Diff, "+ran") {
		t.Errorf("run's diff: %q", d.Diff)
	}
	if call(t, cs, "diff", map[string]any{"changeset": r.Changeset.ID, "format": "name-status"}, &d); !strings.Contains(d.Diff, "run.txt") {
		t.Errorf("run's diff --name-status: %q", d.Diff)
	}
	if _, err := os.Stat(filepath.Join(ws, "run.txt")); err == nil {
		t.Error("run's write reached the workspace")
	}
	// pinfold run's result line is not part of the output, even when the
	// output has no newline of its own; stdin is given.
	if res = call(t, cs, "run", map[string]any{"command": []string{"sh", "-c", "printf no-newline; cat >&2"}, "stdin": "to stderr"}, &r); res.IsError || r.Stdout != "no-newline" || !strings.Contains(text(res), "to stderr") {
		t.Errorf("run without a newline: %+v %s", r, text(res))
	}

	// run is pinfold run: pinfold.yaml's dispatch picks the profile, and
	// the host profile runs only what its allow-list names.
	cs2 := stdio(t, store, workspace(t, `version: 1
profiles:
  onhost:
    backend: host
    host:
      allow: ["echo allowed*"]
dispatch:
  - command: echo
    profile: onhost
`))
	if res = call(t, cs2, "run", map[string]any{"command": []string{"echo", "allowed", "here"}}, &r); res.IsError || r.Stdout != "allowed here\n" {
		t.Errorf("run allowed on the host: %s", text(res))
	}
	res = call(t, cs2, "run", map[string]any{"command": []string{"echo", "refused"}}, nil)
	if !res.IsError || !strings.Contains(text(res), "PF174") || !strings.Contains(text(res), "host.allow") {
		t.Errorf("run refused by the policy: %s", text(res))
	}
}

// TestStdioApply: with mcp: {apply: true}, apply and discard are tools,
// and apply writes the changeset into the workspace.
func TestStdioApply(t *testing.T) {
	store := storeDir(t)
	ws := workspace(t, "version: 1\nmcp:\n  apply: true\n")
	cs := stdio(t, store, ws)
	if got := tools(t, cs); !slices.Contains(got, "apply") || !slices.Contains(got, "discard") {
		t.Fatalf("tools with mcp.apply: %q", got)
	}
	id := useSession(t, cs)
	if res := call(t, cs, "apply", map[string]any{"session": id}, nil); res.IsError {
		t.Fatalf("apply: %s", text(res))
	}
	if b, err := os.ReadFile(filepath.Join(ws, "notes/hello.txt")); err != nil || string(b) != "hello from the agent\n" {
		t.Errorf("applied file: %q %v", b, err)
	}
	var r struct{ Changeset struct{ ID string } }
	call(t, cs, "run", map[string]any{"command": []string{"sh", "-c", "echo x > gone.txt"}}, &r)
	if res := call(t, cs, "discard", map[string]any{"changeset": r.Changeset.ID}, nil); res.IsError {
		t.Fatalf("discard: %s", text(res))
	}
	if res := call(t, cs, "diff", map[string]any{"changeset": r.Changeset.ID}, nil); !res.IsError {
		t.Errorf("diff of a discarded changeset: %s", text(res))
	}
	if _, err := os.Stat(filepath.Join(ws, "gone.txt")); err == nil {
		t.Error("a discarded write reached the workspace")
	}
}

// serve starts a real pinfold serve on loopback with tenant agent's token
// (and more "TENANT TOKEN" lines) and returns its address.
func serve(t *testing.T, token string, more ...string) string {
	t.Helper()
	store := storeDir(t)
	stopAll(t, store)
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("agent "+token+"\n"+strings.Join(more, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := exec.Command(pinfold, "serve", "--socket", filepath.Join(t.TempDir(), "api.sock"), "--listen", "127.0.0.1:0", "--tokens", tokens)
	srv.Dir = t.TempDir()
	srv.Env = append(os.Environ(), "PINFOLD_STORE="+store)
	errp, err := srv.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Signal(syscall.SIGTERM); srv.Wait() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(errp)
		for sc.Scan() {
			if _, a, ok := strings.Cut(sc.Text(), " and http://"); ok {
				addr <- a
			}
			fmt.Fprintln(os.Stderr, sc.Text())
		}
	}()
	select {
	case a := <-addr:
		return a
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not say where it listens")
	}
	return ""
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestHTTP drives serve's /mcp with the Go SDK's streamable HTTP client
// as a tenant; a wrong token is refused.
func TestHTTP(t *testing.T) {
	const token, other = "mcp-agent-0123456789abcdef", "mcp-other-0123456789abcdef"
	addr := serve(t, token, "other "+other)
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wrong := &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: &http.Client{Transport: bearer{"not-the-token-0123456789"}}, MaxRetries: -1}
	if cs, err := c.Connect(ctx, wrong, nil); err == nil {
		cs.Close()
		t.Error("a wrong token was served")
	}
	tr := &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: &http.Client{Transport: bearer{token}}}
	cs, err := c.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer cs.Close()
	if got := tools(t, cs); slices.Contains(got, "apply") {
		t.Errorf("tools over HTTP: %q", got)
	}
	id := useSession(t, cs)
	var l struct{ Sessions []sess }
	if call(t, cs, "session_list", map[string]any{"all": true}, &l); len(l.Sessions) != 1 {
		t.Errorf("the tenant's sessions: %+v", l.Sessions)
	}

	// Another tenant sees none of it.
	tr2 := &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: &http.Client{Transport: bearer{other}}}
	cs2, err := c.Connect(ctx, tr2, nil)
	if err != nil {
		t.Fatalf("connect as the other tenant: %v", err)
	}
	defer cs2.Close()
	if res := call(t, cs2, "diff", map[string]any{"session": id}, nil); !res.IsError || !strings.Contains(text(res), "PF") {
		t.Errorf("another tenant's diff: %s", text(res))
	}
	if call(t, cs2, "session_list", map[string]any{"all": true}, &l); len(l.Sessions) != 0 {
		t.Errorf("another tenant lists: %+v", l.Sessions)
	}

	// Without a token, nothing of MCP is served.
	resp, err := http.Post("http://"+addr+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no token: %s", resp.Status)
	}
}

// TestTypeScriptClient runs testdata/client.cjs, an agent through the
// official TypeScript SDK's client (npm @modelcontextprotocol/sdk, which
// scripts/test-setup.sh installs into /var/cache/pinfold-tools/mcp-ts;
// PINFOLD_MCP_TS names another directory), against pinfold mcp on stdio
// and serve's /mcp with a token. Missing node or the SDK fails the test
// under CI=true and skips it otherwise.
func TestTypeScriptClient(t *testing.T) {
	dir := os.Getenv("PINFOLD_MCP_TS")
	if dir == "" {
		dir = "/var/cache/pinfold-tools/mcp-ts"
	}
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "node_modules/@modelcontextprotocol/sdk/package.json"))
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("node or the TypeScript MCP SDK is missing (scripts/test-setup.sh installs them): %v", err)
		}
		t.Skipf("node or the TypeScript MCP SDK is missing (scripts/test-setup.sh installs them): %v", err)
	}
	const token = "mcp-ts-agent-0123456789abcdef"
	addr := serve(t, token)
	script, err := filepath.Abs("testdata/client.cjs")
	if err != nil {
		t.Fatal(err)
	}
	store := storeDir(t)
	stopAll(t, store)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(dir, "node_modules"), "PINFOLD="+pinfold,
		"WS="+workspace(t, ""), "PINFOLD_STORE="+store, "MCP_URL=http://"+addr+"/mcp", "MCP_TOKEN="+token)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "stdio: ok") || !strings.Contains(string(out), "http: ok") {
		t.Errorf("node %s: %v\n%s", script, err, out)
	}
}
