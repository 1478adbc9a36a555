package cli_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// execWith runs pinfold exec with extra environment variables and stdin
// and returns its output, error output and status.
func execWith(t *testing.T, ws string, env []string, stdin string, args ...string) (string, string, int) {
	t.Helper()
	// Bounded: a hang (the fast path once blocked sending stdin while the
	// agent waited for it to read the output, SIGTERM blocked) fails.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, pinfold, append([]string{"exec"}, args...)...)
	cmd.Dir = ws
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.WaitDelay = 2 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("running pinfold exec: %v", err)
	}
	if ctx.Err() != nil {
		t.Errorf("pinfold exec %s: still running after %v: killed", strings.Join(args, " "), 2*time.Minute)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// TestExecFastPath: `pinfold exec [-i] SESSION -- CMD` (an id or a name)
// is done by the launcher before the Go runtime starts
// (initc/fastexec.c), with the same output, error output and status as
// the Go side's exec; what it does not do (other flags, a prefix, an exec
// that did not start) goes to the Go side, which explains; and a link
// planted in place of the agent's socket is not dialled.
func TestExecFastPath(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the launcher is built for amd64 only")
	}
	store := storeDir(t)
	ws := t.TempDir()
	r := startSession(t, ws, "--name", "fast")
	// GODEBUG=inittrace=1 has the Go runtime print a line per package
	// it initialises: the fast path prints none.
	trace := []string{"GODEBUG=inittrace=1"}
	goSide := []string{"PINFOLD_NO_LAUNCH_CACHE=1"}
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	for _, c := range []struct {
		args  []string
		fast  bool
		stdin string
	}{
		{[]string{r.ID, "--", "true"}, true, ""},
		{[]string{r.ID, "sh", "-c", `echo out; echo err >&2; exit 7`}, true, ""},
		{[]string{r.ID, "--", "sh", "-c", `printf '%s\n' "$@"`, "x", `a "quoted\" \\ <arg>`, "tab\tnew\nline", "ünï"}, true, ""},
		{[]string{r.ID, "--", "sh", "-c", `head -c 3000000 /dev/zero | tr '\0' x; echo`}, true, ""},
		{[]string{r.ID, "--", "sh", "-c", `kill -9 $$`}, true, ""},
		{[]string{r.ID, "--", "cat"}, true, "not passed without -i"},
		{[]string{"-i", r.ID, "--", "sh", "-c", "tr a-z A-Z; exit 5"}, true, "piped\n"},
		{[]string{"--interactive", r.ID, "sh", "-c", "wc -c; sha256sum"}, true, big},
		{[]string{"-i", r.ID, "--", "sh", "-c", "wc -c"}, true, ""},
		// Output while stdin is still being sent: more of both than the
		// socket and the pipes hold.
		{[]string{"-i", r.ID, "--", "cat"}, true, strings.Repeat(big, 8)},
		{[]string{"-i", "fast", "--", "cat"}, true, "by name"},
		{[]string{"fast", "--", "true"}, true, ""},                // a name
		{[]string{r.ID, "--", "--", "x"}, false, ""},              // no command "--": not found, explained by Go
		{[]string{r.ID, "--", "no-such-command"}, false, ""},      // idem
		{[]string{r.ID, "--", "/etc/hostname"}, false, ""},        // not executable
		{[]string{"-w", "/no/such/dir", r.ID, "true"}, false, ""}, // a flag
		{[]string{"no-such-name", "--", "true"}, false, ""},       // no such session
		{[]string{r.ID[:6], "--", "true"}, false, ""},             // a prefix
		{[]string{"000000000000", "--", "true"}, false, ""},       // no such session
	} {
		name := strings.Join(c.args, " ")
		out, errs, code := execWith(t, ws, nil, c.stdin, c.args...)
		gout, gerrs, gcode := execWith(t, ws, goSide, c.stdin, c.args...)
		if out != gout || errs != gerrs || code != gcode {
			t.Errorf("%s: %d %q %q; the Go side: %d %q %q", name, code, trunc(out), errs, gcode, trunc(gout), gerrs)
		}
		_, terrs, _ := execWith(t, ws, trace, c.stdin, c.args...)
		if fast := !strings.Contains(terrs, "init runtime"); fast != c.fast {
			t.Errorf("%s: on the fast path %v, want %v", name, fast, c.fast)
		}
	}

	// A link in place of the socket, to a socket of the host's: refused.
	sock := filepath.Join(store, "sessions", r.ID, "run", "agent.sock")
	if err := os.Rename(sock, sock+".real"); err != nil {
		t.Fatal(err)
	}
	defer os.Rename(sock+".real", sock)
	host := filepath.Join(t.TempDir(), "host.sock")
	l, err := net.Listen("unix", host)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dialled := make(chan struct{}, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			dialled <- struct{}{}
			c.Close()
		}
	}()
	if err := os.Symlink(host, sock); err != nil {
		t.Fatal(err)
	}
	_, errs, code := execWith(t, ws, nil, "", r.ID, "--", "true")
	if code != 125 || !strings.Contains(errs, "PF192") {
		t.Errorf("a link in place of the socket: %d %q", code, errs)
	}
	select {
	case <-dialled:
		t.Error("the link in place of the agent's socket was dialled")
	case <-time.After(100 * time.Millisecond):
	}
	os.Remove(sock)
}

func trunc(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// TestExecFastPathLostSession: a record that says running whose
// supervisor is gone (its pid now another process's, or a container
// outliving it, its agent still answering) is a lost session to the Go
// side, which refuses the exec; the fast path leaves it to the Go side
// instead of running the command there.
func TestExecFastPathLostSession(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the launcher is built for amd64 only")
	}
	store := storeDir(t)
	ws := t.TempDir()
	r := startSession(t, ws, "--name", "gone")
	rec := filepath.Join(store, "sessions", r.ID, "session.json")
	b, err := os.ReadFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	// The supervisor's pid with another start time: another process.
	re := regexp.MustCompile(`"pid_start": [0-9]+`)
	if !re.Match(b) {
		t.Fatalf("no pid_start in %s", b)
	}
	b = re.ReplaceAll(b, []byte(`"pid_start": 1`))
	if err := os.WriteFile(rec+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(rec+".tmp", rec); err != nil {
		t.Fatal(err)
	}
	out, errs, code := execWith(t, ws, nil, "", "gone", "--", "echo", "ran")
	if code != 125 || out != "" || !strings.Contains(errs, "is lost") {
		t.Errorf("exec in a session whose supervisor is gone: %d %q %q", code, out, errs)
	}
}

// TestExecSignalsWhileOutputWaits: while pinfold's output waits for its
// reader (a pipe nobody reads yet), a signal sent to pinfold still reaches
// the command, on the fast path as on the Go side (whose relay sends it
// beside its copy of the output).
func TestExecSignalsWhileOutputWaits(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the launcher is built for amd64 only")
	}
	storeDir(t)
	ws := t.TempDir()
	r := startSession(t, ws)
	for _, side := range []struct {
		name string
		env  []string
	}{{"the fast path", nil}, {"the Go side", []string{"PINFOLD_NO_LAUNCH_CACHE=1"}}} {
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(pinfold, "exec", r.ID, "--", "sh", "-c", `rm -f /tmp/st; trap : TERM; yes; echo $? >/tmp/st`)
		cmd.Dir = ws
		cmd.Env = append(os.Environ(), side.env...)
		cmd.Stdout = pw
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pw.Close()
		time.Sleep(time.Second) // the pipe is full
		cmd.Process.Signal(syscall.SIGTERM)
		got := ""
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if out, _, code := execWith(t, ws, nil, "", r.ID, "--", "cat", "/tmp/st"); code == 0 {
				got = strings.TrimSpace(out)
				break
			}
		}
		if got != "143" {
			t.Errorf("%s: SIGTERM while the output waits: the command's status %q, want 143 (it got SIGTERM)", side.name, got)
		}
		pr.Close() // pinfold's writes now fail
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("%s: pinfold went on once its output's reader left", side.name)
		}
	}
}
