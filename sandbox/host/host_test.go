package host_test

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/host"
)

var env = []string{"PATH=/usr/bin:/bin"}

func run(t *testing.T, spec sandbox.Spec, cmd *sandbox.Cmd) *sandbox.Result {
	t.Helper()
	res, err := sandbox.Run(t.Context(), host.Runtime{}, spec, cmd)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestExitStatusAndSignals(t *testing.T) {
	ws := t.TempDir()
	var out bytes.Buffer
	res := run(t, sandbox.Spec{Workspace: ws}, &sandbox.Cmd{Args: []string{"sh", "-c", "pwd; exit 5"}, Env: env, Stdout: &out})
	if res.ExitCode != 5 || strings.TrimSpace(out.String()) != ws {
		t.Errorf("got %d %q", res.ExitCode, out.String())
	}
	res = run(t, sandbox.Spec{}, &sandbox.Cmd{Args: []string{"sh", "-c", "kill -KILL $$"}, Env: env})
	if res.ExitCode != 137 || res.Reason != sandbox.ReasonSignaled {
		t.Errorf("killed: got %d %s", res.ExitCode, res.Reason)
	}
	// Signal reaches the command's whole process group.
	sb, _ := host.Runtime{}.New(t.Context(), sandbox.Spec{})
	p, err := sb.Run(t.Context(), &sandbox.Cmd{Args: []string{"sh", "-c", "sleep 30 & wait"}, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	p.Signal(syscall.SIGTERM)
	if res, _ := p.Wait(); res.ExitCode != 143 {
		t.Errorf("SIGTERM: got %d", res.ExitCode)
	}
}

func TestTimeout(t *testing.T) {
	start := time.Now()
	res := run(t, sandbox.Spec{}, &sandbox.Cmd{Args: []string{"sleep", "30"}, Env: env, Timeout: 300 * time.Millisecond})
	if res.ExitCode != sandbox.ExitCodeTimeout || res.Reason != sandbox.ReasonTimeout || time.Since(start) > 20*time.Second {
		t.Errorf("got %d %s after %s", res.ExitCode, res.Reason, time.Since(start))
	}
}

func TestNotFound(t *testing.T) {
	_, err := sandbox.Run(t.Context(), host.Runtime{}, sandbox.Spec{}, &sandbox.Cmd{Args: []string{"pinfold-no-such"}, Env: env})
	var ee *sandbox.ExecError
	if !errors.As(err, &ee) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("got %v", err)
	}
}

func TestTerminal(t *testing.T) {
	inR, inW := io.Pipe()
	defer inW.Close()
	var out bytes.Buffer
	sb, _ := host.Runtime{}.New(t.Context(), sandbox.Spec{})
	p, err := sb.Run(t.Context(), &sandbox.Cmd{Args: []string{"sh", "-c", "stty size; read x; echo got $x"}, Env: env,
		TTY: true, Rows: 21, Cols: 77, Stdin: inR, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(inW, "line\n")
	res, err := p.Wait()
	got := strings.ReplaceAll(out.String(), "\r", "")
	if err != nil || res.ExitCode != 0 || !strings.Contains(got, "21 77\n") || !strings.Contains(got, "got line\n") {
		t.Errorf("got %v %+v %q", err, res, got)
	}
}

func TestRefusesIsolation(t *testing.T) {
	for _, spec := range []sandbox.Spec{
		{Network: sandbox.NetworkNone},
		{Mounts: []sandbox.Mount{{Source: "/tmp", Target: "/x"}}},
		{Limits: sandbox.Limits{Memory: 1 << 30}},
		{Base: sandbox.Base{Kind: sandbox.BaseDebian12}},
		{Workspace: "/tmp", Access: sandbox.AccessReadOnly},
	} {
		_, err := host.Runtime{}.New(t.Context(), spec)
		var ue *sandbox.UnsupportedError
		if !errors.As(err, &ue) {
			t.Errorf("%+v: got %v", spec, err)
		}
	}
}
