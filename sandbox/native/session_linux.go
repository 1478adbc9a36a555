package native

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/pinfold/pinfold/internal/agent"
	"github.com/pinfold/pinfold/sandbox"
)

// Session is a native sandbox that stays up (sandbox.Session): its
// command is pinfold's session agent, which forks every command it is
// asked to run inside the running sandbox. The agent is pinfold's own
// binary, bound in read-only: $PINFOLD_AGENT, else pinfold beside the
// running binary or on PATH (WithAgent chooses another).
type Session struct {
	agent *agent.Session // talks to the agent; unexported so the API names no internal package
	sb    *Sandbox
	proc  *Process
	dir   string
	sock  string
	env   []string
}

var (
	_ sandbox.Sessioner = (*Runtime)(nil)
	_ sandbox.Session   = (*Session)(nil)
)

// Run starts cmd in the session (sandbox.Session).
func (s *Session) Run(ctx context.Context, cmd *sandbox.Cmd) (sandbox.Process, error) {
	return s.agent.Run(ctx, cmd)
}

// ForwardPort forwards hostAddr to port on the sandbox's loopback
// (sandbox.Session).
func (s *Session) ForwardPort(hostAddr string, port int) (net.Listener, error) {
	return s.agent.ForwardPort(hostAddr, port)
}

// Close ends everything in the session.
func (s *Session) Close() error { return s.agent.Close() }

// WithAgent makes sessions run the agent from the pinfold binary at path.
func WithAgent(path string) Option { return func(o *options) { o.agent = path } }

// agentBinary finds pinfold's binary for a session's agent.
func agentBinary(o *options) (string, error) {
	if o.agent != "" {
		return o.agent, nil
	}
	p, err := agent.Binary()
	if err != nil {
		return "", fmt.Errorf("%w, or use native.WithAgent", err)
	}
	return p, nil
}

// Session starts a native sandbox of spec that stays up (see
// NewSession).
func (r *Runtime) Session(ctx context.Context, spec sandbox.Spec) (sandbox.Session, error) {
	s, err := NewSession(ctx, spec, r.opts...)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// NewSession starts a sandbox of spec that stays up until Close; its
// commands share its /tmp, home, processes and writes.
func NewSession(ctx context.Context, spec sandbox.Spec, opts ...Option) (*Session, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	exe, err := agentBinary(&o)
	if err != nil {
		return nil, fmt.Errorf("starting a session: %w", err)
	}
	dir, err := os.MkdirTemp("", "pinfold-session-")
	if err != nil {
		return nil, err
	}
	s := &Session{dir: dir, sock: filepath.Join(dir, "run", agent.SockName)}
	fail := func(err error) (*Session, error) {
		if s.proc != nil {
			s.proc.Kill()
			s.proc.Wait()
		}
		if s.sb != nil {
			s.sb.Close()
		}
		os.RemoveAll(dir)
		return nil, err
	}
	if spec.Mounts, err = agent.SessionDirs(dir, exe, spec.Mounts, false); err != nil {
		return fail(err)
	}
	if s.sb, err = New(ctx, spec, opts...); err != nil {
		return fail(err)
	}
	s.env = agent.SessionEnv(&s.sb.spec)
	// The agent lives as long as the session, whatever becomes of ctx.
	if s.proc, err = s.sb.Start(context.WithoutCancel(ctx), &sandbox.Cmd{Args: []string{agent.AgentPath, agent.AgentCommand, "0"}, Env: s.env}); err != nil {
		return fail(err)
	}
	wd := ""
	if s.sb.spec.Access != sandbox.AccessNone {
		wd = s.sb.spec.Workspace
	}
	if s.agent, err = agent.NewSession(ctx, s.sock, s.proc, wd, s.sb.spec.Limits, func() error {
		s.sb.Close()
		return os.RemoveAll(s.dir)
	}); err != nil {
		return fail(err)
	}
	return s, nil
}
