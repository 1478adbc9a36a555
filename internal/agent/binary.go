package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/pinfold/pinfold/internal/helper"
	"github.com/pinfold/pinfold/sandbox"
)

// Binary finds pinfold's binary, which a session's agent is: PINFOLD_AGENT,
// the running binary when it is pinfold (it is beside itself), a pinfold
// beside it, or one on PATH.
func Binary() (string, error) {
	if p, err := helper.Find("pinfold", "PINFOLD_AGENT"); err == nil {
		return p, nil
	}
	return "", errors.New("a session runs pinfold's binary inside as its agent, and none was found (this program is not pinfold, none is beside it or on PATH): install pinfold (scripts/setup.sh), or set PINFOLD_AGENT to its path")
}

// SessionDirs makes the run and home directories of a session's host
// directory dir and returns spec's mounts with the session's added: the
// agent (pinfold's binary exe), the run directory (its socket) and the
// home. ro marks the two directories read-only, for a runtime that copies
// them into the sandbox rather than binding them (kubernetes).
func SessionDirs(dir, exe string, mounts []sandbox.Mount, ro bool) ([]sandbox.Mount, error) {
	for _, d := range []string{"run", "home"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	return append(append([]sandbox.Mount(nil), mounts...),
		sandbox.Mount{Source: exe, Target: AgentPath, ReadOnly: true},
		sandbox.Mount{Source: filepath.Join(dir, "run"), Target: RunDir, ReadOnly: ro},
		sandbox.Mount{Source: filepath.Join(dir, "home"), Target: Home, ReadOnly: ro}), nil
}

// SessionEnv is the agent's environment in a sandbox of spec: the
// sandbox's default one, with the session's home.
func SessionEnv(spec *sandbox.Spec) []string {
	var env []string
	for _, kv := range sandbox.DefaultEnv(spec, false) {
		if !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	return append(env, "HOME="+Home)
}

// StartSession starts a session for a runtime whose sandboxes run the
// agent as an ordinary command (gVisor, kubernetes): a host directory for
// the session (SessionDirs; ro as there), a sandbox of spec with it made
// by newSandbox, which also returns the spec the sandbox normalized, and
// the agent in it, answering on its socket. Closing the session closes
// the sandbox and removes the directory.
func StartSession(ctx context.Context, spec sandbox.Spec, ro bool,
	newSandbox func(context.Context, sandbox.Spec) (sandbox.Sandbox, *sandbox.Spec, error)) (*Session, error) {
	exe, err := Binary()
	if err != nil {
		return nil, &sandbox.SpecError{Field: "session", Err: err}
	}
	dir, err := os.MkdirTemp("", "pinfold-session-")
	if err != nil {
		return nil, err
	}
	// A sandbox's root may reach run and home (each 0700) through it.
	os.Chmod(dir, 0o755)
	var sb sandbox.Sandbox
	fail := func(err error) (*Session, error) {
		if sb != nil {
			sb.Close()
		}
		os.RemoveAll(dir)
		return nil, err
	}
	if spec.Mounts, err = SessionDirs(dir, exe, spec.Mounts, ro); err != nil {
		return fail(err)
	}
	sb, sp, err := newSandbox(ctx, spec)
	if err != nil {
		return fail(err)
	}
	// The agent lives as long as the session, whatever becomes of ctx.
	proc, err := sb.Run(context.WithoutCancel(ctx), &sandbox.Cmd{Args: []string{AgentPath, AgentCommand, "0"}, Env: SessionEnv(sp)})
	if err != nil {
		return fail(err)
	}
	wd := ""
	if sp.Access != sandbox.AccessNone {
		wd = sp.Workspace
	}
	s, err := NewSession(ctx, filepath.Join(dir, "run", SockName), proc, wd, sp.Limits, func() error {
		sb.Close()
		return os.RemoveAll(dir)
	})
	if err != nil {
		proc.Signal(os.Kill)
		proc.Wait()
		return fail(err)
	}
	return s, nil
}
