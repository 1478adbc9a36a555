package kubernetes

import (
	"context"
	"os"
	"path/filepath"
	"strings"

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
	exe, err := agent.Binary()
	if err != nil {
		return nil, &sandbox.SpecError{Field: "session", Err: err}
	}
	dir, err := os.MkdirTemp("", "pinfold-session-")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (sandbox.Session, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	// The session's mounts as internal/session gives them: the kubernetes
	// runtime copies the agent in and makes the home and run directory
	// the pod's own; the host's run directory gets the agent's socket.
	if spec.Mounts, err = agent.SessionDirs(dir, exe, spec.Mounts, true); err != nil {
		return fail(err)
	}
	sb, err := r.New(ctx, spec)
	if err != nil {
		return fail(err)
	}
	ks := sb.(*Sandbox)
	var env []string
	for _, kv := range sandbox.DefaultEnv(&ks.spec, false) {
		if !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	env = append(env, "HOME="+agent.Home)
	// The agent lives as long as the session, whatever becomes of ctx.
	proc, err := sb.Run(context.WithoutCancel(ctx), &sandbox.Cmd{Args: []string{agent.AgentPath, agent.AgentCommand, "0"}, Env: env})
	if err != nil {
		return fail(err)
	}
	wd := ""
	if ks.spec.Access != sandbox.AccessNone {
		wd = ks.spec.Workspace
	}
	s, err := agent.NewSession(ctx, filepath.Join(dir, "run", agent.SockName), proc, wd, ks.spec.Limits, func() error {
		return os.RemoveAll(dir)
	})
	if err != nil {
		proc.Signal(os.Kill)
		proc.Wait()
		return fail(err)
	}
	return s, nil
}
