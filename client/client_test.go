package client_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pinfold/pinfold/client"
	"github.com/pinfold/pinfold/internal/conformance"
	"github.com/pinfold/pinfold/internal/nettest"
	"github.com/pinfold/pinfold/internal/server"
)

var bin string // directory of pinfold, pinfold-net and pinfold-api

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pinfold-client-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Chmod(dir, 0o755)
	if _, err := nettest.BuildPinfold(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// testServer serves the API in this process on a unix socket and, with
// tokens, on TCP loopback.
type testServer struct {
	store, sock, tcp string
}

func startServer(t *testing.T, cfg server.Config) *testServer {
	t.Helper()
	return startServerLimited(t, cfg, server.Bounds{})
}

func startServerLimited(t *testing.T, cfg server.Config, lim server.Bounds) *testServer {
	t.Helper()
	ts := &testServer{store: t.TempDir()}
	t.Setenv("PINFOLD_STORE", ts.store)
	cfg.Store, cfg.Pinfold = ts.store, filepath.Join(bin, "pinfold")
	ts.sock = filepath.Join(ts.store, "api.sock")
	ul, err := server.ListenUnix(ts.sock)
	if err != nil {
		t.Fatal(err)
	}
	ls := []net.Listener{ul}
	if cfg.Tokens != nil {
		tl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ts.tcp = "http://" + tl.Addr().String()
		ls = append(ls, tl)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { server.ServeLimited(ctx, server.New(cfg), lim, ls...); close(done) }()
	t.Cleanup(func() {
		// Sessions outlive the server: stop them.
		c, _ := client.New("unix://" + ts.sock)
		if l, err := c.List(context.Background(), false); err == nil {
			for _, s := range l {
				c.Delete(context.Background(), s.ID)
			}
		}
		cancel()
		<-done
	})
	return ts
}

func unixClient(t *testing.T, ts *testServer) *client.Client {
	c, err := client.New("unix://" + ts.sock)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestUnixSocket(t *testing.T) {
	ts := startServer(t, server.Config{})
	c := unixClient(t, ts)
	ctx := context.Background()
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "a.txt"), []byte("a\n"), 0o644)
	if h, err := c.Health(ctx); err != nil || h.Status != "ok" {
		t.Fatalf("health: %v %v", h, err)
	}
	sb, err := c.Create(ctx, client.CreateRequest{Workspace: ws, Name: "one"})
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != "running" || sb.Changeset == "" {
		t.Fatalf("created %+v", sb)
	}
	res, err := c.Exec(ctx, "one", client.ExecRequest{Args: []string{"sh", "-c", "cat; echo err >&2; echo b > a.txt; echo t > /tmp/t; exit 4"}, Stdin: "in\n"})
	if err != nil || res.ExitCode != 4 || res.Stdout != "in\n" || res.Stderr != "err\n" {
		t.Fatalf("exec: %+v %v", res, err)
	}
	// Streamed: output as it comes, stdin, the exit status.
	var out, errb bytes.Buffer
	e, err := c.Stream(ctx, sb.ID, client.StreamRequest{Args: []string{"sh", "-c", "cat /tmp/t; tr a-z A-Z; echo e >&2; exit 6"}},
		strings.NewReader("streamed\n"), &out, &errb)
	if err != nil || e.Code != 6 || out.String() != "t\nSTREAMED\n" || errb.String() != "e\n" {
		t.Errorf("stream: %+v %v %q %q", e, err, out.String(), errb.String())
	}
	// A terminal and its size; a signal.
	out.Reset()
	e, err = c.Stream(ctx, sb.ID, client.StreamRequest{Args: []string{"sh", "-c", "tty; stty size"}, TTY: true, Rows: 30, Cols: 90}, nil, &out, nil)
	if err != nil || e.Code != 0 || !strings.Contains(out.String(), "/dev/pts/") || !strings.Contains(out.String(), "30 90") {
		t.Errorf("tty: %+v %v %q", e, err, out.String())
	}
	out.Reset()
	p, err := c.Start(ctx, sb.ID, client.StreamRequest{Args: []string{"sh", "-c", "echo ready; sleep 100"}}, nil, &syncWriter{w: &out}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return strings.Contains(out.String(), "ready") })
	p.Signal(syscall.SIGTERM)
	if e, err := p.Wait(); err != nil || e.Code != 128+15 {
		t.Errorf("signal: %+v %v", e, err)
	}
	if e, err := c.Stream(ctx, sb.ID, client.StreamRequest{Args: []string{"no-such-command"}}, nil, nil, nil); err != nil || !e.NotFound || e.Code != 127 {
		t.Errorf("missing command: %+v %v", e, err)
	}

	// Files.
	if err := c.WriteFile(ctx, sb.ID, "/tmp/up.bin", 0o600, strings.NewReader("uploaded")); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := c.ReadFile(ctx, sb.ID, "/tmp/up.bin", &got); err != nil || got.String() != "uploaded" {
		t.Errorf("read back: %q %v", got.String(), err)
	}
	if fi, err := c.Stat(ctx, sb.ID, "/tmp/up.bin"); err != nil || fi.Size != 8 || fi.Mode != 0o600 || fi.Type != "file" {
		t.Errorf("stat: %+v %v", fi, err)
	}
	if l, err := c.ListFiles(ctx, sb.ID, ws); err != nil || len(l) != 1 || l[0].Name != "a.txt" {
		t.Errorf("list: %+v %v", l, err)
	}
	if err := c.Remove(ctx, sb.ID, "/tmp/up.bin", false); err != nil {
		t.Error(err)
	}
	if _, err := c.Stat(ctx, sb.ID, "/tmp/up.bin"); !client.IsNotFound(err) {
		t.Errorf("stat after remove: %v", err)
	}
	if err := c.ReadFile(ctx, sb.ID, "/no/such", io.Discard); !client.IsNotFound(err) {
		t.Errorf("read of a missing file: %v", err)
	}
	// The workspace's file was written through the changeset.
	if b, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(b) != "a\n" {
		t.Errorf("the workspace changed during the session: %q", b)
	}
	d, err := c.Diff(ctx, sb.ID, "")
	if err != nil || !strings.Contains(d, "-a\n+b") {
		t.Errorf("diff: %q %v", d, err)
	}
	if err := c.Apply(ctx, sb.ID, false); err == nil || !strings.Contains(err.Error(), "409") {
		t.Errorf("apply while running: %v", err)
	}

	// A published port reaches the sandbox's loopback.
	if _, err := exec.LookPath("python3"); err == nil {
		res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Args: []string{"sh", "-c",
			"cd /tmp && (python3 -m http.server --bind 127.0.0.1 8765 >/dev/null 2>&1 &); for i in $(seq 100); do python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8765))' 2>/dev/null && break; sleep 0.05; done"}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("starting a server: %+v %v", res, err)
		}
		port, err := c.Publish(ctx, sb.ID, 8765, 0)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get("http://" + port.Host + "/")
		if err != nil {
			t.Fatalf("through the published port: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), "Directory listing") {
			t.Errorf("published port answered %q", body)
		}
		if err := c.Unpublish(ctx, sb.ID, 8765); err != nil {
			t.Error(err)
		}
		if _, err := net.DialTimeout("tcp", port.Host, time.Second); err == nil {
			t.Error("the port is still published")
		}
	}

	stopped, err := c.Delete(ctx, sb.ID)
	if err != nil || stopped.State != "stopped" || stopped.Modified != 1 {
		t.Fatalf("delete: %+v %v", stopped, err)
	}
	if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Args: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "PF192") {
		t.Errorf("exec after delete: %v", err)
	}
	if err := c.Apply(ctx, sb.ID, false); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(b) != "b\n" {
		t.Errorf("applied: %q", b)
	}
	waitTrash(ts.store)
}

func TestTCPTenants(t *testing.T) {
	tokA, tokB := "token-of-tenant-a-0123456789", "token-of-tenant-b-0123456789"
	ts := startServer(t, server.Config{Tokens: map[string]string{tokA: "a", tokB: "b"}, MaxUpload: 1000, MaxBody: 2000})
	ctx := context.Background()
	for _, tok := range []string{"", "wrong-token-0123456789"} {
		req, _ := http.NewRequest("GET", ts.tcp+"/v1/health", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("token %q: status %d", tok, resp.StatusCode)
		}
	}
	a, _ := client.New(ts.tcp, client.WithToken(tokA))
	b, _ := client.New(ts.tcp, client.WithToken(tokB))
	if _, err := a.Create(ctx, client.CreateRequest{Workspace: "/etc"}); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("a tenant named a host workspace: %v", err)
	}
	sa, err := a.Create(ctx, client.CreateRequest{Name: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := a.Exec(ctx, sa.ID, client.ExecRequest{Args: []string{"sh", "-c", "echo secret > /tmp/s; pwd"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("tenant a's exec: %+v %v", res, err)
	}
	// Tenant b sees nothing of a's: not its sandbox, files, changeset.
	for name, err := range map[string]error{
		"get":  func() error { _, err := b.Get(ctx, sa.ID); return err }(),
		"name": func() error { _, err := b.Get(ctx, "mine"); return err }(),
		"exec": func() error { _, err := b.Exec(ctx, sa.ID, client.ExecRequest{Args: []string{"true"}}); return err }(),
		"read": b.ReadFile(ctx, sa.ID, "/tmp/s", io.Discard),
		"diff": func() error { _, err := b.Diff(ctx, sa.ID, ""); return err }(),
		"stream": func() error {
			_, err := b.Stream(ctx, sa.ID, client.StreamRequest{Args: []string{"true"}}, nil, nil, nil)
			return err
		}(),
		"delete": func() error { _, err := b.Delete(ctx, sa.ID); return err }(),
	} {
		if !client.IsNotFound(err) {
			t.Errorf("tenant b's %s of a's sandbox: %v", name, err)
		}
	}
	if l, err := b.List(ctx, true); err != nil || len(l) != 0 {
		t.Errorf("tenant b lists %v %v", l, err)
	}
	// Unix-socket clients are the owner: tenants' sessions are not theirs either.
	if _, err := unixClient(t, ts).Get(ctx, sa.ID); !client.IsNotFound(err) {
		t.Errorf("the owner reached a tenant's sandbox: %v", err)
	}
	// Bounded uploads and bodies.
	err = a.WriteFile(ctx, sa.ID, "/tmp/big", 0, bytes.NewReader(make([]byte, 1001)))
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 413 {
		t.Errorf("upload over the bound: %v", err)
	}
	err = a.WriteFile(ctx, sa.ID, "/tmp/big", 0, io.MultiReader(strings.NewReader(strings.Repeat("x", 600)), strings.NewReader(strings.Repeat("y", 600))))
	if !errors.As(err, &ce) || ce.Status != 413 {
		t.Errorf("chunked upload over the bound: %v", err)
	}
	if _, err := a.Stat(ctx, sa.ID, "/tmp/big"); !client.IsNotFound(err) {
		t.Errorf("a refused upload left a file: %v", err)
	}
	if _, err := a.Exec(ctx, sa.ID, client.ExecRequest{Args: []string{"echo", strings.Repeat("x", 3000)}}); !errors.As(err, &ce) || ce.Status != 413 {
		t.Errorf("body over the bound: %v", err)
	}
	// Snapshots are the tenant's too.
	if res, err := a.Exec(ctx, sa.ID, client.ExecRequest{Args: []string{"sh", "-c", "echo kept > kept.txt"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	snap, err := a.Snapshot(ctx, sa.ID)
	if err != nil || snap.Size == 0 {
		t.Fatalf("snapshot: %+v %v", snap, err)
	}
	if _, err := a.Delete(ctx, sa.ID); err != nil {
		t.Error(err)
	}
	if _, err := b.Create(ctx, client.CreateRequest{Snapshot: snap.ID}); !client.IsNotFound(err) {
		t.Errorf("tenant b restored a's snapshot: %v", err)
	}
	sa2, err := a.Create(ctx, client.CreateRequest{Snapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := a.Exec(ctx, sa2.ID, client.ExecRequest{Args: []string{"cat", "kept.txt"}}); err != nil || res.Stdout != "kept\n" {
		t.Errorf("restored: %+v %v", res, err)
	}
	a.Delete(ctx, sa2.ID)
}

func TestDisconnectMidExec(t *testing.T) {
	ts := startServer(t, server.Config{})
	c := unixClient(t, ts)
	ctx := context.Background()
	sb, err := c.Create(ctx, client.CreateRequest{Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var out syncWriter
	p, err := c.Start(ctx, sb.ID, client.StreamRequest{Args: []string{"sh", "-c", "echo ready; exec sleep 4242"}}, nil, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return strings.Contains(out.String(), "ready") })
	p.Close() // gone mid-exec
	waitFor(t, func() bool { return len(conformance.ProcessesWith("sleep 4242")) == 0 })
	if h, err := c.Health(ctx); err != nil || h.Status != "ok" {
		t.Errorf("health after a disconnect: %v %v", h, err)
	}
	if res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Args: []string{"echo", "still"}}); err != nil || res.Stdout != "still\n" {
		t.Errorf("exec after a disconnect: %+v %v", res, err)
	}
}

// TestServerRestart kills the server with SIGKILL: its sessions live on
// (their supervisors are processes of their own) and the next server
// serves them; a session whose supervisor died meanwhile is reported lost
// and leaves nothing.
func TestServerRestart(t *testing.T) {
	store := t.TempDir()
	t.Setenv("PINFOLD_STORE", store)
	sock := filepath.Join(store, "api.sock")
	serve := func() *exec.Cmd {
		cmd := exec.Command(filepath.Join(bin, "pinfold-api"), "serve")
		cmd.Env = append(os.Environ(), "PINFOLD_STORE="+store)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool {
			c, err := net.Dial("unix", sock)
			if err == nil {
				c.Close()
			}
			return err == nil
		})
		return cmd
	}
	srv := serve()
	c, _ := client.New(sock)
	ctx := context.Background()
	keep, err := c.Create(ctx, client.CreateRequest{Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	lose, err := c.Create(ctx, client.CreateRequest{Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Delete(context.Background(), keep.ID)
		c.Delete(context.Background(), lose.ID)
		srv.Process.Kill()
		srv.Wait()
	})
	c.Exec(ctx, lose.ID, client.ExecRequest{Args: []string{"sh", "-c", "sleep 5151 >/dev/null 2>&1 &"}})
	srv.Process.Kill()
	srv.Wait()
	// While no server runs, the second session's supervisor is killed.
	pid := supervisorPid(t, store, lose.ID)
	syscall.Kill(pid, syscall.SIGKILL)
	waitFor(t, func() bool { return len(conformance.ProcessesWith("sleep 5151")) == 0 })
	srv = serve()
	if res, err := c.Exec(ctx, keep.ID, client.ExecRequest{Args: []string{"echo", "alive"}}); err != nil || res.Stdout != "alive\n" {
		t.Errorf("the surviving session after a restart: %+v %v", res, err)
	}
	got, err := c.Get(ctx, lose.ID)
	if err != nil || got.State != "lost" {
		t.Errorf("the killed session after a restart: %+v %v", got, err)
	}
	if p := conformance.ProcessesWith("__session-supervise " + lose.ID); len(p) > 0 {
		t.Errorf("left running: %v", p)
	}
}

func supervisorPid(t *testing.T, store, id string) int {
	b, err := os.ReadFile(filepath.Join(store, "sessions", id, "session.json"))
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	i := bytes.Index(b, []byte(`"pid": `))
	fmt.Sscanf(string(b[i+7:]), "%d", &pid)
	return pid
}

type syncWriter struct {
	mu chan struct{}
	w  *bytes.Buffer
	b  bytes.Buffer
}

func (s *syncWriter) lock() {
	if s.mu == nil {
		s.mu = make(chan struct{}, 1)
	}
	s.mu <- struct{}{}
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.lock()
	defer func() { <-s.mu }()
	if s.w != nil {
		return s.w.Write(p)
	}
	return s.b.Write(p)
}

func (s *syncWriter) String() string {
	s.lock()
	defer func() { <-s.mu }()
	if s.w != nil {
		return s.w.String()
	}
	return s.b.String()
}

// waitFor waits for cond: long, as a loaded machine is slow to end
// processes and start servers, and the wait ends as soon as cond holds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("timed out waiting")
}

// waitTrash waits for the detached cleaners of applied changesets.
func waitTrash(store string) {
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if len(conformance.ProcessesWith("clean --trash")) == 0 {
			break
		}
	}
	os.RemoveAll(filepath.Join(store, "trash"))
}

// A tenant's removed sandbox leaves no workspace or changeset behind, and
// an upload over the bound is answered 413 even to a client that sends
// its whole body before it reads (as Python's http.client does).
func TestTenantRemoveAndOversizedUpload(t *testing.T) {
	tok := "token-of-tenant-a-0123456789"
	ts := startServer(t, server.Config{Tokens: map[string]string{tok: "a"}, MaxUpload: 1000})
	ctx := context.Background()
	a, _ := client.New(ts.tcp, client.WithToken(tok))
	s, err := a.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.tcp, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := make([]byte, 32<<20)
	head := fmt.Sprintf("PUT /v1/sandboxes/%s/files?path=/tmp/big HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n", s.ID, tok, len(body))
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := conn.Write(append([]byte(head), body...)); err != nil {
		t.Fatalf("sending the whole body: %v (the server closed before reading it)", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != 413 {
		t.Fatalf("oversized upload: %v %v", resp, err)
	}
	resp.Body.Close()

	if res, err := a.Exec(ctx, s.ID, client.ExecRequest{Args: []string{"sh", "-c", "echo x > new.txt"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	if _, err := a.Delete(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	got, err := a.Get(ctx, s.ID)
	if err != nil || got.Changeset == "" || got.Workspace == "" {
		t.Fatalf("stopped sandbox: %+v %v", got, err)
	}
	req, _ := http.NewRequest("DELETE", ts.tcp+"/v1/sandboxes/"+s.ID+"?remove=true", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("remove: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if _, err := os.Stat(got.Workspace); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the removed sandbox's workspace %s is still there: %v", got.Workspace, err)
	}
	if _, err := os.Stat(filepath.Join(ts.store, "changesets", got.Changeset)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the removed sandbox's changeset is still there: %v", err)
	}
}

// An upload the agent refuses before it has read it (its directory is
// missing) is answered with the agent's reason, not a broken pipe.
func TestUploadIntoMissingDirectory(t *testing.T) {
	ts := startServer(t, server.Config{})
	ctx := context.Background()
	c := unixClient(t, ts)
	s, err := c.Create(ctx, client.CreateRequest{Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Delete(ctx, s.ID)
	for i := 0; i < 5; i++ {
		err := c.WriteFile(ctx, s.ID, "/tmp/no/such/dir/f", 0, bytes.NewReader(make([]byte, 8<<20)))
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status >= 500 || strings.Contains(err.Error(), "broken pipe") {
			t.Fatalf("upload %d into a missing directory: %v", i, err)
		}
	}
}
