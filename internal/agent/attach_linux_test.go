package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
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
