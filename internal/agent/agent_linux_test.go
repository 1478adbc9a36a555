package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startAgent serves the agent on a socket in a fresh directory, as
// AgentMain does on RunDir's, and returns the socket.
func startAgent(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), sockName)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	a := &agent{l: l.(*net.UnixListener), done: make(chan int, 1)}
	go a.serve()
	t.Cleanup(func() { l.Close() })
	return sock
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestPingAndUnknownOp(t *testing.T) {
	sock := startAgent(t)
	if _, err := Call(ctx(t), sock, &Request{Op: "ping"}); err != nil {
		t.Fatal(err)
	}
	if _, err := Call(ctx(t), sock, &Request{Op: "format-disk"}); err == nil || !strings.Contains(err.Error(), "unknown op") {
		t.Errorf("unknown op: %v", err)
	}
}

func TestExec(t *testing.T) {
	sock := startAgent(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		name           string
		req            Request
		stdin          string
		stdout, stderr string
		exit           Exit
	}{
		{name: "output", req: Request{Args: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}}, stdout: "out\n", stderr: "err\n", exit: Exit{Code: 3}},
		{name: "stdin", req: Request{Args: []string{"cat"}}, stdin: "piped\x00bytes", stdout: "piped\x00bytes"},
		{name: "env and dir", req: Request{Args: []string{"sh", "-c", `printf "%s %s" "$PF_X" "$PWD"`}, Env: []string{"PF_X=y"}, Dir: dir}, stdout: "y " + dir},
		{name: "clearenv", req: Request{Args: []string{"/usr/bin/env"}, Env: []string{"ONLY=1"}, Clearenv: true}, stdout: "ONLY=1\n"},
		{name: "signalled", req: Request{Args: []string{"sh", "-c", "kill -KILL $$"}}, exit: Exit{Code: 128 + 9, Signal: 9}},
		{name: "not found", req: Request{Args: []string{"pinfold-no-such-command"}}, exit: Exit{Code: 127, NotFound: true}},
		{name: "not executable", req: Request{Args: []string{dir}}, exit: Exit{Code: 126, NotExecutable: true}},
		{name: "bad dir", req: Request{Args: []string{"true"}, Dir: filepath.Join(dir, "missing")}, exit: Exit{Code: 125, BadDir: true}},
		{name: "no command", req: Request{}, exit: Exit{Code: 125}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			s := ExecStreams{Stdout: &out, Stderr: &errb}
			if tc.stdin != "" {
				s.Stdin = strings.NewReader(tc.stdin)
			}
			req := tc.req
			e, err := Exec(ctx(t), sock, &req, s)
			if err != nil {
				t.Fatal(err)
			}
			e.Error = "" // its wording is the system's
			if *e != tc.exit || out.String() != tc.stdout || errb.String() != tc.stderr {
				t.Errorf("got %+v %q %q, want %+v %q %q", *e, out.String(), errb.String(), tc.exit, tc.stdout, tc.stderr)
			}
		})
	}
}

// Signals, terminal sizes and a client that goes away reach the command.
func TestExecFrames(t *testing.T) {
	sock := startAgent(t)
	x, err := StartExec(ctx(t), sock, &Request{Args: []string{"sh", "-c", "trap 'echo usr1; exit 7' USR1; echo ready; while :; do sleep 0.05; done"}})
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	done := make(chan *Exit, 1)
	go func() { e, _ := x.Wait(pw, io.Discard, nil); pw.Close(); done <- e }()
	line := make([]byte, 6)
	if _, err := io.ReadFull(pr, line); err != nil || string(line) != "ready\n" {
		t.Fatalf("%q %v", line, err)
	}
	go io.Copy(io.Discard, pr)
	if err := x.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if e := <-done; e == nil || e.Code != 7 {
		t.Errorf("after USR1: %+v", e)
	}
	x.Close()

	x, err = StartExec(ctx(t), sock, &Request{Args: []string{"sh", "-c", "stty size; read l; stty size"}, TTY: true, Rows: 30, Cols: 100, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	// Resized once the first size showed: earlier, on a slow machine,
	// the new size could reach the terminal before the first stty ran.
	pr, pw = io.Pipe()
	var out bytes.Buffer
	go func() { e, err := x.Wait(pw, nil, nil); pw.CloseWithError(err); done <- e }()
	for !strings.Contains(out.String(), "30 100") {
		b := make([]byte, 64)
		n, err := pr.Read(b)
		out.Write(b[:n])
		if err != nil {
			t.Fatalf("terminal: no first size: %q %v", out.String(), err)
		}
	}
	x.Resize(50, 132)
	x.Stdin().Write([]byte("go\n"))
	rest, err := io.ReadAll(pr)
	out.Write(rest)
	e := <-done
	x.Close()
	if err != nil || e == nil || e.Code != 0 || !strings.Contains(out.String(), "50 132") {
		t.Errorf("terminal: %+v %v %q", e, err, out.String())
	}

	// A client gone mid-exec hangs the command up.
	mark := filepath.Join(t.TempDir(), "hup")
	x, err = StartExec(ctx(t), sock, &Request{Args: []string{"sh", "-c", "trap 'echo > " + mark + "; exit 0' HUP; echo ready; while :; do sleep 0.05; done"}})
	if err != nil {
		t.Fatal(err)
	}
	if typ, _, err := x.Next(); err != nil || typ != FrameStarted {
		t.Fatalf("first frame %q %v", typ, err)
	}
	if typ, b, err := x.Next(); err != nil || typ != FrameStdout || string(b) != "ready\n" {
		t.Fatalf("second frame %q %q %v", typ, b, err)
	}
	x.Close()
	waitFor(t, func() bool { _, err := os.Stat(mark); return err == nil })
	if err := x.Send(FrameExit, nil); err == nil {
		t.Error("a client sent an agent's frame")
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(25 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatal("timed out")
}

func TestFiles(t *testing.T) {
	sock := startAgent(t)
	dir := t.TempDir()
	c := ctx(t)
	p := filepath.Join(dir, "f")
	if err := WriteFile(c, sock, p, 0o6755, strings.NewReader("hello"), 0); err != nil {
		t.Fatal(err)
	}
	fi, err := Stat(c, sock, p)
	if err != nil || fi.Type != "file" || fi.Size != 5 || fi.Mode != 0o755 || fi.Name != "f" {
		t.Fatalf("stat after write (setuid and setgid dropped): %+v %v", fi, err)
	}
	var got bytes.Buffer
	var heard *FileInfo
	if err := ReadFile(c, sock, p, &got, func(fi *FileInfo) { heard = fi }); err != nil || got.String() != "hello" || heard == nil || heard.Size != 5 {
		t.Fatalf("read: %q %+v %v", got.String(), heard, err)
	}
	big := bytes.Repeat([]byte("0123456789"), 300_000) // several frames
	if err := WriteFile(c, sock, p, 0, bytes.NewReader(big), 0); err != nil {
		t.Fatal(err)
	}
	got.Reset()
	if err := ReadFile(c, sock, p, &got, nil); err != nil || !bytes.Equal(got.Bytes(), big) {
		t.Fatalf("big read: %d bytes, %v", got.Len(), err)
	}
	if err := WriteFile(c, sock, p, 0, bytes.NewReader(big), 100); !errors.Is(err, ErrTooLarge) {
		t.Errorf("over the limit: %v", err)
	}
	// The client gave up the upload; the agent notices and removes its
	// temporary file after the client's error, so it is waited for.
	list, err := List(c, sock, dir)
	for end := time.Now().Add(10 * time.Second); err == nil && len(list) > 1 && time.Now().Before(end); list, err = List(c, sock, dir) {
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || len(list) != 1 || list[0].Name != "f" || list[0].Size != int64(len(big)) {
		t.Errorf("list after a refused upload (nothing else written): %+v %v", list, err)
	}
	if err := Remove(c, sock, p, false); err != nil {
		t.Fatal(err)
	}
	if _, err := Stat(c, sock, p); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stat after remove: %v", err)
	}
}

// Paths a client should not be able to turn against the files behind
// them: symbolic links are replaced or removed, never followed, and a
// failed write leaves nothing.
func TestFilesHostilePaths(t *testing.T) {
	sock := startAgent(t)
	c := ctx(t)
	dir, outside := t.TempDir(), t.TempDir()
	secret := filepath.Join(outside, "secret")
	os.WriteFile(secret, []byte("keep"), 0o600)
	os.Mkdir(filepath.Join(outside, "tree"), 0o755)
	os.WriteFile(filepath.Join(outside, "tree", "x"), []byte("keep"), 0o600)
	link := filepath.Join(dir, "link")
	os.Symlink(secret, link)
	dlink := filepath.Join(dir, "dlink")
	os.Symlink(filepath.Join(outside, "tree"), dlink)

	fi, err := Stat(c, sock, link)
	if err != nil || fi.Type != "symlink" || fi.Target != secret {
		t.Errorf("stat of a link describes the link: %+v %v", fi, err)
	}
	if err := WriteFile(c, sock, link, 0o644, strings.NewReader("pwned"), 0); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(secret); string(b) != "keep" {
		t.Errorf("a write through a link changed its target: %q", b)
	}
	if fi, err := os.Lstat(link); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the link was not replaced: %v %v", fi, err)
	}
	if err := Remove(c, sock, dlink, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(outside, "tree", "x")); err != nil {
		t.Errorf("removing a link to a directory removed what it points to: %v", err)
	}
	for _, tc := range []struct {
		name string
		do   func() error
	}{
		{"empty path", func() error { _, err := Stat(c, sock, ""); return err }},
		{"write into a missing directory", func() error {
			return WriteFile(c, sock, filepath.Join(dir, "no", "such", "f"), 0, strings.NewReader("x"), 0)
		}},
		{"write over a directory", func() error { return WriteFile(c, sock, outside, 0, strings.NewReader("x"), 0) }},
		{"read a directory", func() error { return ReadFile(c, sock, outside, io.Discard, nil) }},
		{"remove a full directory without recursive", func() error { return Remove(c, sock, outside, false) }},
		{"list a file", func() error { _, err := List(c, sock, secret); return err }},
		{"nul in the path", func() error { _, err := Stat(c, sock, dir+"/a\x00b"); return err }},
		{"port 0", func() error { _, err := Connect(c, sock, 0); return err }},
		{"port 65536", func() error { _, err := Connect(c, sock, 65536); return err }},
	} {
		if err := tc.do(); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	if b, _ := os.ReadFile(secret); string(b) != "keep" {
		t.Errorf("secret changed: %q", b)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".pinfold-upload-") {
			t.Errorf("an upload's temporary file was left: %s", e.Name())
		}
	}
}

// An upload whose client goes away writes nothing.
func TestWriteClientGone(t *testing.T) {
	sock := startAgent(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	c, err := dial(ctx(t), sock)
	if err != nil {
		t.Fatal(err)
	}
	writeRequest(c, &Request{Op: "write", Path: p})
	fw := &frameWriter{w: c}
	fw.frame(FrameStdin, []byte("partial"))
	c.Close()
	// The agent removes its temporary file once it sees the client gone;
	// a fixed wait could look before it did.
	var ents []os.DirEntry
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ents, _ = os.ReadDir(dir)
		if len(ents) == 0 || time.Now().After(end) {
			break
		}
	}
	if len(ents) != 0 {
		t.Errorf("left %v", ents)
	}
}

func TestConnect(t *testing.T) {
	sock := startAgent(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		io.Copy(c, c)
		c.Close()
	}()
	fl, err := Forward(sock, "127.0.0.1:0", l.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	c, err := net.Dial("tcp", fl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("echo me"))
	c.(*net.TCPConn).CloseWrite()
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "echo me" {
		t.Errorf("forwarded: %q %v", b, err)
	}
}
