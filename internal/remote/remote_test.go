package remote

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// call runs Main with args and returns its stdout, stderr and status.
func call(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	dir := t.TempDir()
	out, _ := os.Create(filepath.Join(dir, "out"))
	errf, _ := os.Create(filepath.Join(dir, "err"))
	in, _ := os.Open(os.DevNull)
	defer out.Close()
	defer errf.Close()
	defer in.Close()
	code := Main(context.Background(), in, out, errf, args)
	o, _ := os.ReadFile(out.Name())
	e, _ := os.ReadFile(errf.Name())
	return string(o), string(e), code
}

// The refusal says what needs Linux and how to reach a server instead.
func TestNeedsLinux(t *testing.T) {
	e := NeedsLinux("run")
	if e.Code != "PF142" || e.Exit != 125 {
		t.Errorf("code %s exit %d", e.Code, e.Exit)
	}
	want := "PF142 pinfold run needs a Linux host: set PINFOLD_HOST to a pinfold server to run commands there"
	if s := e.Error(); !strings.HasPrefix(s, want+"\n") || !strings.Contains(s, "Fix: ") || !strings.Contains(e.Fix, "PINFOLD_HOST=") {
		t.Errorf("the message:\n%s", s)
	}
	if e := NeedsLinux("session rm"); !strings.Contains(e.Fix, "on the server's host") {
		t.Errorf("session rm's fix: %s", e.Fix)
	}
}

// Every command is either run on the server or refused with PF142; a
// name pinfold has nowhere is a usage error.
func TestMainRefuses(t *testing.T) {
	t.Setenv("PINFOLD_HOST", "")
	t.Setenv("PINFOLD_API_HELPER", filepath.Join(t.TempDir(), "none"))
	for _, c := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"run", "--", "true"}, 125, "PF142 pinfold run needs a Linux host: set PINFOLD_HOST"},
		{[]string{"diff"}, 125, "PF142 pinfold diff needs a Linux host"},
		{[]string{"serve", "--listen", "127.0.0.1:0"}, 125, "PF142 pinfold serve needs a Linux host"},
		{[]string{"session", "rm", "x"}, 125, "PF142 pinfold session rm needs a Linux host"},
		{[]string{"session", "port", "x", "80"}, 125, "PF142 pinfold session port needs a Linux host"},
		// Without PINFOLD_HOST, the remote commands say to set it.
		{[]string{"session", "start"}, 125, "PF142 pinfold session start needs a Linux host: set PINFOLD_HOST"},
		{[]string{"exec", "s", "--", "true"}, 125, "export PINFOLD_HOST="},
		{[]string{"shell", "s"}, 125, "PF142 pinfold shell needs"},
		{[]string{"rnu"}, 125, `PF101 unknown command "rnu"`},
		{[]string{"session", "strat"}, 125, `PF101 unknown command "strat" for "pinfold session"`},
		{nil, 125, "PINFOLD_HOST"},
		{[]string{"session"}, 125, "pinfold session start"},
		{[]string{"version"}, 0, ""},
		{[]string{"--help"}, 0, ""},
		{[]string{"exec", "--help"}, 0, ""},
		{[]string{"exec", "-e", "A=1", "-h"}, 0, ""},
		{[]string{"session", "start", "--name", "x", "--help"}, 0, ""},
		// A help flag of the remote command is the remote command's.
		{[]string{"exec", "s", "--", "grep", "--help"}, 125, "PF142 pinfold exec needs"},
		{[]string{"exec", "-e", "-h", "s", "grep", "-h"}, 125, "PF142 pinfold exec needs"},
	} {
		out, errs, code := call(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.err) || (c.err == "" && errs != "") {
			t.Errorf("%q: %d %q %q", c.args, code, out, errs)
		}
	}
	if out, _, _ := call(t, "version"); out != "pinfold dev\n" {
		t.Errorf("version: %q", out)
	}
	if out, _, _ := call(t, "--help"); !strings.Contains(out, "pinfold exec") || !strings.Contains(out, "need a Linux host") {
		t.Errorf("help: %q", out)
	}
	// With PINFOLD_HOST, a missing helper is named with how to build it.
	t.Setenv("PINFOLD_HOST", "http://127.0.0.1:9")
	if _, errs, code := call(t, "session", "ls"); code != 125 || !strings.Contains(errs, "PF194") {
		t.Errorf("without a helper: %d %q", code, errs)
	}
}

// The helper's exit status is pinfold's, and 128+N when signal N ended it.
func TestExitStatus(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("sh")
	}
	for _, c := range []struct {
		script string
		code   int
	}{{"exit 0", 0}, {"exit 9", 9}, {"kill -TERM $$", 143}, {"kill -KILL $$", 137}} {
		if got := exitStatus(exec.Command("sh", "-c", c.script).Run()); got != c.code {
			t.Errorf("%s: %d, want %d", c.script, got, c.code)
		}
	}
	if got := exitStatus(exec.Command(filepath.Join(t.TempDir(), "none")).Run()); got != 125 {
		t.Errorf("a failed start: %d", got)
	}
}
