package kubernetes

import (
	"context"

	"github.com/pinfold/pinfold/internal/agent"
	"github.com/pinfold/pinfold/sandbox"
)

var _ sandbox.Sessioner = (*Runtime)(nil)

// Session starts a pod of spec that stays up until the session is closed:
// its command is pinfold's session agent (pinfold's binary, copied in), and
// every Run is an exec of the agent's bridge through the API server, which
// the agent forks into the command. Commands share the pod's /tmp, home,
// processes and workspace copy; with the changeset access the copy's
// changes come back into spec.Changeset's Upper when the session closes.
// ForwardPort reaches the pod's loopback through the agent. Pause is not
// offered: the pod's processes have no host pid to freeze.
//
// pinfold's binary is PINFOLD_AGENT, else pinfold beside the running
// binary, else on PATH.
func (r *Runtime) Session(ctx context.Context, spec sandbox.Spec) (sandbox.Session, error) {
	s, err := agent.StartSession(ctx, spec, true, func(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, *sandbox.Spec, error) {
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
