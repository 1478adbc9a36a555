package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/internal/remote"
)

// front runs pinfold's command line of macOS and Windows (remote.Main,
// which cmd/pinfold runs there) in this process, with stdin, and returns
// its stdout, stderr and exit status.
func front(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	if err := os.WriteFile(in, []byte(stdin), 0o600); err != nil {
		t.Fatal(err)
	}
	files := make([]*os.File, 3)
	for i, name := range []string{"in", "out", "err"} {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files[i] = f
	}
	code := remote.Main(context.Background(), files[0], files[1], files[2], args)
	out, _ := os.ReadFile(files[1].Name())
	errs, _ := os.ReadFile(files[2].Name())
	return string(out), string(errs), code
}

// TestRemoteFrontEnd drives a server over TCP with a token, as pinfold on
// a Mac drives a Linux host: session and exec go through pinfold-api's
// client, run with os/exec (Windows cannot exec), whose stdin is the
// caller's and whose exit status is passed on; run is refused.
func TestRemoteFrontEnd(t *testing.T) {
	storeDir(t)
	const token = "mac-laptop-0123456789abcdef"
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("laptop "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := exec.Command(pinfold, "serve", "--socket", filepath.Join(t.TempDir(), "api.sock"), "--listen", "127.0.0.1:0", "--tokens", tokens)
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
		}
	}()
	select {
	case a := <-addr:
		t.Setenv("PINFOLD_HOST", "http://"+a)
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not say where it listens")
	}
	t.Setenv("PINFOLD_TOKEN", token)
	t.Setenv("PINFOLD_API_HELPER", filepath.Join(filepath.Dir(pinfold), "pinfold-api"))

	out, errs, code := front(t, "", "session", "start", "--json")
	var r sessionRecord
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.State != "running" {
		t.Fatalf("start: %d %q %q", code, out, errs)
	}
	t.Cleanup(func() { front(t, "", "session", "stop", r.ID) })
	out, errs, code = front(t, "from the laptop\n", "exec", "-i", r.ID, "--", "sh", "-c", "cat; echo via-server; exit 9")
	if code != 9 || out != "from the laptop\nvia-server\n" {
		t.Errorf("exec: %d %q %q", code, out, errs)
	}
	if out, errs, code = front(t, "", "session", "ls"); code != 0 || !strings.Contains(out, r.ID) {
		t.Errorf("ls: %d %q %q", code, out, errs)
	}
	// What works on the host's store alone is refused, with PINFOLD_HOST set too.
	for _, c := range []struct{ args, err []string }{
		{[]string{"run", "--", "true"}, []string{"PF142 pinfold run needs a Linux host", "pinfold session start"}},
		{[]string{"diff"}, []string{"PF142 pinfold diff needs a Linux host"}},
		{[]string{"session", "rm", r.ID}, []string{"PF142 pinfold session rm needs a Linux host", "on the server's host"}},
	} {
		_, errs, code := front(t, "", c.args...)
		for _, e := range c.err {
			if code != 125 || !strings.Contains(errs, e) {
				t.Errorf("%q: %d %q", c.args, code, errs)
			}
		}
	}
	if _, errs, code = front(t, "", "session", "stop", r.ID); code != 0 || !strings.Contains(errs, "stopped") {
		t.Errorf("stop: %d %q", code, errs)
	}
}

// TestRemoteTerminal runs exec -it through PINFOLD_HOST under a terminal:
// pinfold-api's client (golang.org/x/term, the same code on macOS) puts
// it in raw mode, sends its size and its new size after SIGWINCH, and
// puts it back as it was.
func TestRemoteTerminal(t *testing.T) {
	t.Setenv("PINFOLD_STORE", t.TempDir())
	ws := t.TempDir()
	sock := filepath.Join(t.TempDir(), "api.sock")
	srv := exec.Command(pinfold, "serve", "--socket", sock)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Signal(syscall.SIGTERM); srv.Wait() })
	waitServer(t, sock)
	r := startSession(t, ws)
	t.Setenv("PINFOLD_HOST", "unix://"+sock)
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	defer tty.Close()
	pty.Setsize(ptmx, &pty.Winsize{Rows: 33, Cols: 101})
	before, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	// The second size is waited for (at most 10 s): SIGWINCH is not
	// ordered with the typed line.
	cmd := exec.Command(pinfold, "exec", "-it", r.ID, "--", "sh", "-c",
		`stty size; read x; i=0; while [ "$(stty size)" = "33 101" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; stty size; echo "got $x"; exit 7`)
	cmd.Dir = ws
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu bytes.Buffer
	lines := make(chan string, 64)
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := ptmx.Read(b)
			if n > 0 {
				lines <- string(b[:n])
			}
			if err != nil {
				close(lines)
				return
			}
		}
	}()
	wait := func(want string) bool {
		deadline := time.After(20 * time.Second)
		for !strings.Contains(mu.String(), want) {
			select {
			case l, ok := <-lines:
				if !ok {
					return false
				}
				mu.WriteString(l)
			case <-deadline:
				return false
			}
		}
		return true
	}
	if !wait("33 101") {
		t.Fatalf("the first size: %q", mu.String())
	}
	pty.Setsize(ptmx, &pty.Winsize{Rows: 40, Cols: 120})
	ptmx.Write([]byte("typed\r"))
	ok := wait("got typed")
	werr := cmd.Wait()
	if !ok || !strings.Contains(mu.String(), "40 120") || cmd.ProcessState.ExitCode() != 7 {
		t.Errorf("exec -it through PINFOLD_HOST: %v %q", werr, mu.String())
	}
	after, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil || after.Lflag != before.Lflag || after.Iflag != before.Iflag || after.Oflag != before.Oflag {
		t.Errorf("the terminal was not put back: %+v, was %+v (%v)", after, before, err)
	}
}

// TestRemoteOnlyElsewhere: Linux's pinfold does not link internal/remote
// (its start-up is unchanged), and the build for macOS and Windows links
// it and none of the sandboxes (only the leaves fault and helper).
func TestRemoteOnlyElsewhere(t *testing.T) {
	deps := func(goos string) []string {
		cmd := exec.Command("go", "list", "-deps", "github.com/pinfold/pinfold/cmd/pinfold")
		cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH=amd64", "CGO_ENABLED=0")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list for %s: %v", goos, err)
		}
		return strings.Fields(string(out))
	}
	const remotePkg = "github.com/pinfold/pinfold/internal/remote"
	linux := deps("linux")
	if slices.Contains(linux, remotePkg) || !slices.Contains(linux, "github.com/pinfold/pinfold/internal/cli") {
		t.Errorf("linux: internal/remote linked, or internal/cli not: %v", linux)
	}
	for _, goos := range []string{"darwin", "windows"} {
		d := deps(goos)
		if !slices.Contains(d, remotePkg) {
			t.Errorf("%s: internal/remote not linked", goos)
		}
		for _, p := range d {
			// fault and helper (the helper lookup) are leaves of the
			// standard library alone.
			if strings.HasPrefix(p, "github.com/pinfold/pinfold/") && p != remotePkg && p != "github.com/pinfold/pinfold/internal/fault" &&
				p != "github.com/pinfold/pinfold/internal/helper" && p != "github.com/pinfold/pinfold/cmd/pinfold" {
				t.Errorf("%s: pinfold links %s", goos, p)
			}
		}
	}
}
