package cli_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestExecForwardsSignals: pinfold exec passes the same signals to the
// command whether the session is local or behind the API (PINFOLD_HOST),
// the user's USR1 and USR2 among them (the remote exec once dropped them),
// and whether the local one is Go's or the launcher's fast path
// (initc/fastexec.c), by name or by id.
func TestExecForwardsSignals(t *testing.T) {
	storeDir(t)
	ws := t.TempDir()
	sock := filepath.Join(t.TempDir(), "api.sock")
	srv := exec.Command(pinfold, "serve", "--socket", sock)
	srv.Dir = ws
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Signal(syscall.SIGTERM); srv.Wait() })
	waitServer(t, sock)
	out, errs, code := pf(t, ws, "session", "start", "--name", "sig")
	if code != 0 {
		t.Fatalf("session start: %d %q", code, errs)
	}
	id := strings.TrimSpace(out)
	t.Cleanup(func() { pf(t, ws, "session", "stop", "sig") })
	script := `trap 'echo got-usr1; exit 31' USR1; trap 'echo got-usr2; exit 32' USR2; echo ready; while :; do sleep 0.05; done`
	for _, v := range []struct{ where, ref, env string }{
		{"local, the Go side", "sig", "PINFOLD_NO_LAUNCH_CACHE=1"},
		{"remote", "sig", "PINFOLD_HOST=unix://" + sock},
		{"local, fast path, by name", "sig", ""},
		{"local, fast path, by id", id, ""},
	} {
		for _, c := range []struct {
			sig  syscall.Signal
			out  string
			code int
		}{{syscall.SIGUSR1, "got-usr1", 31}, {syscall.SIGUSR2, "got-usr2", 32}} {
			where := v.where
			cmd := exec.Command(pinfold, "exec", v.ref, "--", "sh", "-c", script)
			cmd.Dir = ws
			cmd.Env = os.Environ()
			if v.env != "" {
				cmd.Env = append(cmd.Env, v.env)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			lines := bufio.NewScanner(stdout)
			if !lines.Scan() || lines.Text() != "ready" {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("%s: the command did not start: %q", where, lines.Text())
			}
			cmd.Process.Signal(c.sig)
			var rest []string
			done := make(chan struct{})
			go func() {
				for lines.Scan() {
					rest = append(rest, lines.Text())
				}
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				// A front end that a signal killed leaves the command
				// running in the session, holding the output open.
				cmd.Process.Kill()
				pf(t, ws, "exec", "sig", "--", "pkill", "-f", "got-usr")
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					t.Fatalf("%s exec, %v: the command did not end", where, c.sig)
				}
			}
			cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != c.code || !strings.Contains(strings.Join(rest, "\n"), c.out) {
				t.Errorf("%s exec, %v: exit %d, output %q; want %d and %s", where, c.sig, code, rest, c.code, c.out)
			}
		}
	}
}

// TestRunForwardsSignalsAtOnce: a pinfold run that does not hand off
// (--json keeps it in Go, to print the result) has its signal handlers in
// place before its command starts, so a USR1 or USR2 sent as soon as the
// command's first output shows reaches the command rather than being
// ignored by Go.
func TestRunForwardsSignalsAtOnce(t *testing.T) {
	ws := t.TempDir()
	script := `trap 'echo got-usr1; exit 31' USR1; trap 'echo got-usr2; exit 32' USR2; echo ready; while :; do sleep 0.05; done`
	for _, c := range []struct {
		sig  syscall.Signal
		out  string
		code int
	}{{syscall.SIGUSR1, "got-usr1", 31}, {syscall.SIGUSR2, "got-usr2", 32}} {
		cmd := exec.Command(pinfold, "run", "--access", "ro", "--json", "--", "sh", "-c", script)
		cmd.Dir = ws
		cmd.WaitDelay = 2 * time.Second
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(stdout)
		if !lines.Scan() || lines.Text() != "ready" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the command did not start: %q", lines.Text())
		}
		cmd.Process.Signal(c.sig)
		var rest []string
		done := make(chan struct{})
		go func() {
			for lines.Scan() {
				rest = append(rest, lines.Text())
			}
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != c.code || !strings.Contains(strings.Join(rest, "\n"), c.out) {
			t.Errorf("%v: exit %d, output %q; want %d and %s", c.sig, code, rest, c.code, c.out)
		}
	}
}
