package agent

import (
	"archive/tar"
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStdioBridge serves a connection on a stream as the agent in a
// kubernetes pod's main does on the attach to it (the kubernetes helper's
// side joined to a socket, as its bridge does): the ready line, a
// command's output whole across many chunks, its exit status, the end's
// chunk once the agent closed its side; a stream closed unused ends with
// the end's chunk alone.
func TestStdioBridge(t *testing.T) {
	sock := startAgent(t)
	open := func() (*io.PipeWriter, *bufio.Reader) {
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		go func() {
			stdioBridge(bufio.NewReader(inR), outW, sock)
			outW.Close()
		}()
		br := bufio.NewReader(outR)
		b := make([]byte, len(BridgeReady))
		if _, err := io.ReadFull(br, b); err != nil || string(b) != BridgeReady {
			t.Fatalf("ready: %q %v", b, err)
		}
		return inW, br
	}
	inW, br := open()
	front := filepath.Join(t.TempDir(), "front.sock")
	l, err := net.Listen("unix", front)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ended := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			ended <- err
			return
		}
		go func() {
			io.Copy(inW, c)
			inW.Close()
		}()
		_, err = io.Copy(c, &ChunkReader{R: br})
		c.Close()
		ended <- err
	}()
	var out, errb bytes.Buffer
	e, err := Exec(ctx(t), front, &Request{Args: []string{"sh", "-c", "seq 1 100000; echo done >&2; exit 3"}}, ExecStreams{Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := 1; i <= 100000; i++ {
		fmt.Fprintln(&want, i)
	}
	if e.Code != 3 || out.String() != want.String() || errb.String() != "done\n" {
		t.Errorf("through the stream: exit %+v, %d bytes of stdout (want %d), stderr %q", *e, out.Len(), want.Len(), errb.String())
	}
	select {
	case err := <-ended:
		if err != nil {
			t.Errorf("the stream's end: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("no end's chunk after the connection")
	}

	inW, br = open()
	inW.Close()
	if n, err := io.Copy(io.Discard, &ChunkReader{R: br}); n != 0 || err != nil {
		t.Errorf("closed unused: %d bytes, %v", n, err)
	}
}

// TestEnvelope: the environment's envelope round-trips, and a stdin that
// ends first is an error (the agent then serves nothing).
func TestEnvelope(t *testing.T) {
	var b bytes.Buffer
	env := []string{"A=1", "B=x=y", "EMPTY="}
	WriteEnv(&b, env)
	b.WriteString("rest")
	r := bufio.NewReader(&b)
	got, err := ReadEnv(r)
	if err != nil || strings.Join(got, ",") != strings.Join(env, ",") {
		t.Errorf("%q %v", got, err)
	}
	if rest, _ := io.ReadAll(r); string(rest) != "rest" {
		t.Errorf("after the envelope: %q", rest)
	}
	if _, err := ReadEnv(strings.NewReader("")); err == nil {
		t.Error("an empty stdin gave an environment")
	}
}

// TestUntarChunks: a workspace's tar in chunks is unpacked with its
// modes (a claimed pod's over the attach); none is nothing; a broken tar
// is an error that says so.
func TestUntarChunks(t *testing.T) {
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	tw.WriteHeader(&tar.Header{Name: "ws/", Typeflag: tar.TypeDir, Mode: 0o755})
	body := strings.Repeat("x", 200000)
	tw.WriteHeader(&tar.Header{Name: "ws/run.sh", Typeflag: tar.TypeReg, Mode: 0o750, Size: int64(len(body))})
	tw.Write([]byte(body))
	tw.Close()
	var chunks bytes.Buffer
	cw := ChunkWriter{W: &chunks}
	cw.Write(tb.Bytes())
	cw.Close()
	dir := t.TempDir()
	if err := untarChunks(&ChunkReader{R: bufio.NewReader(&chunks)}, dir); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "ws", "run.sh"))
	if b, _ := os.ReadFile(filepath.Join(dir, "ws", "run.sh")); err != nil || string(b) != body || fi.Mode().Perm() != 0o750 {
		t.Errorf("unpacked: %v %v", fi, err)
	}
	var none bytes.Buffer
	ChunkWriter{W: &none}.Close()
	if err := untarChunks(&ChunkReader{R: bufio.NewReader(&none)}, ""); err != nil {
		t.Errorf("no workspace: %v", err)
	}
	var bad bytes.Buffer
	bw := ChunkWriter{W: &bad}
	bw.Write([]byte("not a tar at all"))
	bw.Close()
	if err := untarChunks(&ChunkReader{R: bufio.NewReader(&bad)}, t.TempDir()); err == nil || !strings.Contains(err.Error(), "unpacking the workspace") {
		t.Errorf("a broken tar: %v", err)
	}
}

// TestWaitLinksDown: main's agent waits until every link but loopback is
// down (netoff's work, seen in sysfs's flags), and lists them; a link
// that stays up is listed up once the wait is over.
func TestWaitLinksDown(t *testing.T) {
	dir := t.TempDir()
	set := func(name, flags string) {
		os.MkdirAll(filepath.Join(dir, name), 0o755)
		os.WriteFile(filepath.Join(dir, name, "flags"), []byte(flags+"\n"), 0o644)
	}
	set("lo", "0x9")
	set("eth0", "0x1003")
	go func() {
		time.Sleep(100 * time.Millisecond)
		set("eth0", "0x1002")
	}()
	start := time.Now()
	got := waitLinksDown(dir, 10*time.Second)
	if got != "eth0 0x1002;lo 0x9" || time.Since(start) < 100*time.Millisecond {
		t.Errorf("after %v: %q", time.Since(start), got)
	}
	set("eth1", "0x1003")
	if got := waitLinksDown(dir, 50*time.Millisecond); !strings.Contains(got, "eth1 0x1003") {
		t.Errorf("a link that stays up: %q", got)
	}
}

// The agent's status file is in the run directory, which the session's
// code may write: only a regular file is read, never through a link (to
// a file holding another status), a FIFO (which would block) or a
// directory.
func TestReadStatusOnlyARegularFile(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "other")
	os.WriteFile(other, []byte("7\n"), 0o600)
	for name, plant := range map[string]func(string) error{
		"link":      func(p string) error { return os.Symlink(other, p) },
		"fifo":      func(p string) error { return syscall.Mkfifo(p, 0o600) },
		"directory": func(p string) error { return os.Mkdir(p, 0o700) },
	} {
		p := filepath.Join(dir, name)
		if err := plant(p); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := readStatus(p); done <- err }()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("a %s was read as the status", name)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("reading a %s blocked", name)
		}
	}
	if b, err := readStatus(other); err != nil || string(b) != "7\n" {
		t.Errorf("the regular file: %q %v", b, err)
	}
}
