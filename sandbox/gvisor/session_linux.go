package gvisor

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"github.com/pinfold/pinfold/internal/agent"
	"github.com/pinfold/pinfold/sandbox"
)

var _ sandbox.Sessioner = (*Runtime)(nil)

// Session starts a gVisor sandbox of spec that stays up until the session
// is closed: its command is pinfold's session agent (pinfold's binary,
// bound in read-only), which listens on a socket in its bound run
// directory, and every Run asks the agent to fork the command inside the
// same sandbox. runsc makes that socket a host one (--host-uds=create,
// for sandboxes that bind a session's run directory), so the host
// connects to it as to a native session's; the sandbox still connects to
// no host socket. Commands share the sandbox's /tmp, home, processes
// and writes (the changeset). ForwardPort reaches its loopback through
// the agent. Pause is not offered: the Sentry's tasks have no host pid
// to freeze.
//
// pinfold's binary is PINFOLD_AGENT, else pinfold beside the running
// binary, else on PATH.
func (r *Runtime) Session(ctx context.Context, spec sandbox.Spec) (sandbox.Session, error) {
	exe, err := agent.Binary()
	if err != nil {
		return nil, &sandbox.SpecError{Field: "session", Err: err}
	}
	dir, err := os.MkdirTemp("", "pinfold-session-")
	if err != nil {
		return nil, err
	}
	os.Chmod(dir, 0o755) // the sandbox's root reaches run and home through it
	fail := func(err error) (sandbox.Session, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	if spec.Mounts, err = agent.SessionDirs(dir, exe, spec.Mounts, false); err != nil {
		return fail(err)
	}
	sb, err := r.New(ctx, spec)
	if err != nil {
		return fail(err)
	}
	gs := sb.(*Sandbox)
	var env []string
	for _, kv := range sandbox.DefaultEnv(&gs.spec, false) {
		if !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	env = append(env, "HOME="+agent.Home)
	// The agent lives as long as the session, whatever becomes of ctx.
	proc, err := sb.Run(context.WithoutCancel(ctx), &sandbox.Cmd{Args: []string{agent.AgentPath, agent.AgentCommand, "0"}, Env: env})
	if err != nil {
		sb.Close()
		return fail(err)
	}
	wd := ""
	if gs.spec.Access != sandbox.AccessNone {
		wd = gs.spec.Workspace
	}
	s, err := agent.NewSession(ctx, filepath.Join(dir, "run", agent.SockName), proc, wd, gs.spec.Limits, func() error {
		sb.Close()
		return os.RemoveAll(dir)
	})
	if err != nil {
		proc.Signal(os.Kill)
		proc.Wait()
		sb.Close()
		return fail(err)
	}
	return s, nil
}
