package gvisor

import (
	"context"

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
	s, err := agent.StartSession(ctx, spec, false, func(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, *sandbox.Spec, error) {
		sb, err := r.New(ctx, spec)
		if err != nil {
			return nil, nil, err
		}
		return sb, &sb.(*Sandbox).spec, nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}
