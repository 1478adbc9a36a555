package conformance

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
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pinfold/pinfold/sandbox"
)

// SessionTarget is a runtime's sessions under test (sandbox.Sessioner).
type SessionTarget struct {
	Sessioner sandbox.Sessioner
	// Spec is the session's sandbox; with the changeset access, what the
	// session writes to the workspace must be in its Upper after Close.
	Spec sandbox.Spec
	// ServeHTTP is a shell command that serves HTTP on the sandbox's
	// 127.0.0.1:8766 in the background (GET /a answered 200) and returns
	// once it answers; "" leaves ForwardPort unchecked.
	ServeHTTP string
	// Python: the sandbox has python3, for RunScript's second check.
	Python bool
	// Processes lists the session's processes whose command line holds
	// pattern; nil: the host's (ProcessesWith). A runtime whose commands
	// are no host processes (gVisor's Sentry runs them) looks inside
	// while the session runs, and after Close lists what served it.
	Processes func(sess sandbox.Session, pattern string) []string
}

// Session runs the session scenarios: commands share /tmp, the home and
// background processes; streams, stdin, signals, timeouts, a terminal and
// its size; a missing command; RunScript; ForwardPort; Close ends
// everything and the sandbox's writes are its changeset's. The commands
// are busybox's and coreutils' (sh, cat, tr, sleep, stty).
func Session(t *testing.T, st SessionTarget) {
	ctx := context.Background()
	spec := st.Spec
	sess, err := st.Sessioner.Session(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	procs := func(pattern string) []string {
		if st.Processes != nil {
			return st.Processes(sess, pattern)
		}
		return ProcessesWith(pattern)
	}
	run := func(cmd *sandbox.Cmd) (*sandbox.Result, string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		if cmd.Stdout == nil {
			cmd.Stdout = &out
		}
		cmd.Stderr = &errb
		p, err := sess.Run(ctx, cmd)
		if err != nil {
			t.Fatalf("%v: %v", cmd.Args, err)
		}
		res, err := p.Wait()
		if err != nil {
			t.Fatalf("%v: %v", cmd.Args, err)
		}
		return res, out.String(), errb.String()
	}
	// Runs share /tmp, the home and background processes.
	res, _, _ := run(&sandbox.Cmd{Args: []string{"sh", "-c", `echo 1 > /tmp/a; echo 2 > "$HOME/b"; if [ -w . ]; then echo s > from-session; fi; sleep 7373 >/dev/null 2>&1 & exit 3`}})
	if res.ExitCode != 3 {
		t.Errorf("exit %d", res.ExitCode)
	}
	res, out, _ := run(&sandbox.Cmd{Args: []string{"sh", "-c", `cat /tmp/a "$HOME/b"; pwd`}})
	if res.ExitCode != 0 || out != "1\n2\n"+spec.Workspace+"\n" {
		t.Errorf("second run: %d %q", res.ExitCode, out)
	}
	if len(procs("sleep 7373")) != 1 {
		t.Error("the background process is gone")
	}
	// Streams: stdin in, output as it comes; a signal; a timeout.
	res, out, errs := run(&sandbox.Cmd{Args: []string{"sh", "-c", "tr a-z A-Z; echo e >&2"}, Stdin: strings.NewReader("in\n")})
	if out != "IN\n" || errs != "e\n" {
		t.Errorf("streams: %q %q", out, errs)
	}
	pr, pw := io.Pipe()
	p, err := sess.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", "echo ready; sleep 100"}, Stdout: pw})
	if err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 6)
	io.ReadFull(pr, line)
	go io.Copy(io.Discard, pr)
	p.Signal(syscall.SIGTERM)
	if res, err := p.Wait(); err != nil || res.Reason != sandbox.ReasonSignaled || res.ExitCode != 143 {
		t.Errorf("signal: %+v %v", res, err)
	}
	res, _, _ = run(&sandbox.Cmd{Args: []string{"sleep", "100"}, Timeout: 200 * time.Millisecond})
	if res.ExitCode != sandbox.ExitCodeTimeout || res.Reason != sandbox.ReasonTimeout {
		t.Errorf("timeout: %+v", res)
	}
	// A terminal, resized while it runs.
	var tout bytes.Buffer
	tp, err := sess.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", "stty size; read x; stty size"}, TTY: true, Rows: 20, Cols: 70,
		Stdin: &slowReader{after: 300 * time.Millisecond, data: "go\n"}, Stdout: &lockedBuffer{b: &tout}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	tp.Resize(40, 120)
	if res, err := tp.Wait(); err != nil || res.ExitCode != 0 || !strings.Contains(tout.String(), "20 70") || !strings.Contains(tout.String(), "40 120") {
		t.Errorf("terminal: %+v %v %q", res, err, tout.String())
	}
	// A missing command is an ExecError, as in Run.
	if _, err := sess.Run(ctx, &sandbox.Cmd{Args: []string{"no-such-command"}}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing command: %v", err)
	}
	// RunScript, in any sandbox.
	var sout bytes.Buffer
	res, err = sandbox.RunScript(ctx, sess, "echo \"$1 from a script\"; cat /tmp/a", "sh", &sandbox.Cmd{Args: []string{"hello"}, Stdout: &sout})
	if err != nil || res.ExitCode != 0 || sout.String() != "hello from a script\n1\n" {
		t.Errorf("RunScript: %+v %v %q", res, err, sout.String())
	}
	if st.Python {
		sout.Reset()
		res, err = sandbox.RunScript(ctx, sess, "import sys\nprint(sum(range(10)), sys.argv[1:])\n", "python3", &sandbox.Cmd{Args: []string{"x"}, Stdout: &sout})
		if err != nil || sout.String() != "45 ['x']\n" {
			t.Errorf("RunScript python3: %+v %v %q", res, err, sout.String())
		}
	}
	if st.ServeHTTP != "" {
		// ForwardPort reaches the sandbox's loopback (its network is none).
		run(&sandbox.Cmd{Args: []string{"sh", "-c", st.ServeHTTP}})
		l, err := sess.ForwardPort("127.0.0.1:0", 8766)
		if err != nil {
			t.Fatal(err)
		}
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("GET /a HTTP/1.0\r\n\r\n"))
		body, _ := io.ReadAll(c)
		c.Close()
		if !strings.Contains(string(body), "200 OK") {
			t.Errorf("through the forwarded port: %q", body)
		}
	}
	// Close ends everything; the session's writes are its changeset's.
	if err := sess.Close(); err != nil {
		t.Error(err)
	}
	if spec.Access == sandbox.AccessChangeset {
		if b, err := os.ReadFile(filepath.Join(spec.Changeset.Upper, "from-session")); err != nil || string(b) != "s\n" {
			t.Errorf("the session's write in its changeset: %q %v", b, err)
		}
	}
	// The kernel kills what was left in the sandbox's PID namespace as
	// its init goes; it may take a moment.
	for end := time.Now().Add(30 * time.Second); len(procs("sleep 7373")) > 0 && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	if p := procs("sleep 7373"); len(p) > 0 {
		t.Errorf("left running after Close: %v", p)
	}
	if _, err := sess.Run(ctx, &sandbox.Cmd{Args: []string{"true"}}); !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("Run after Close: %v", err)
	}
}

// slowReader gives data once after has passed, then ends.
type slowReader struct {
	after time.Duration
	data  string
	done  bool
}

func (r *slowReader) Read(p []byte) (int, error) {
	if r.done {
		time.Sleep(time.Second) // a terminal's stdin stays open a while
		return 0, io.EOF
	}
	time.Sleep(r.after)
	r.done = true
	return copy(p, r.data), nil
}

type lockedBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
