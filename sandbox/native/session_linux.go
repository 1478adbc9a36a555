package native

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pinfold/pinfold/internal/agent"
	"github.com/pinfold/pinfold/sandbox"
)

// Session is a native sandbox that stays up (sandbox.Session): its
// command is pinfold's session agent, which forks every command it is
// asked to run inside the running sandbox. The agent is pinfold's own
// binary, bound in read-only: $PINFOLD_AGENT, else pinfold beside the
// running binary or on PATH (WithAgent chooses another).
type Session struct {
	sb   *Sandbox
	proc *Process
	dir  string
	sock string
	env  []string

	mu     sync.Mutex
	closed bool
	fwd    []net.Listener
}

var _ sandbox.Sessioner = (*Runtime)(nil)

// WithAgent makes sessions run the agent from the pinfold binary at path.
func WithAgent(path string) Option { return func(o *options) { o.agent = path } }

// agentBinary finds pinfold's binary for a session's agent.
func agentBinary(o *options) (string, error) {
	if o.agent != "" {
		return o.agent, nil
	}
	if p := os.Getenv("PINFOLD_AGENT"); p != "" {
		return p, nil
	}
	exe, err := os.Executable()
	if err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		if filepath.Base(exe) == "pinfold" {
			return exe, nil
		}
		if p := filepath.Join(filepath.Dir(exe), "pinfold"); isFile(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath("pinfold"); err == nil {
		return p, nil
	}
	return "", errors.New("a session needs pinfold's binary for its agent: set PINFOLD_AGENT or use native.WithAgent")
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
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
		return nil, &sandbox.SpecError{Field: "mount", Err: err}
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
	for _, d := range []string{"run", "home"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			return fail(err)
		}
	}
	spec.Mounts = append(append([]sandbox.Mount(nil), spec.Mounts...),
		sandbox.Mount{Source: exe, Target: agent.AgentPath, ReadOnly: true},
		sandbox.Mount{Source: filepath.Join(dir, "run"), Target: agent.RunDir},
		sandbox.Mount{Source: filepath.Join(dir, "home"), Target: agent.Home})
	if s.sb, err = New(ctx, spec, opts...); err != nil {
		return fail(err)
	}
	for _, kv := range sandbox.DefaultEnv(&s.sb.spec, false) {
		if !strings.HasPrefix(kv, "HOME=") {
			s.env = append(s.env, kv)
		}
	}
	s.env = append(s.env, "HOME="+agent.Home)
	// The agent lives as long as the session, whatever becomes of ctx.
	if s.proc, err = s.sb.Start(context.WithoutCancel(ctx), &sandbox.Cmd{Args: []string{agent.AgentPath, agent.AgentCommand, "0"}, Env: s.env}); err != nil {
		return fail(err)
	}
	for i := 0; ; i++ {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := agent.Call(cctx, s.sock, &agent.Request{Op: "ping"})
		cancel()
		if err == nil {
			break
		}
		if i == 2000 || ctx.Err() != nil {
			return fail(fmt.Errorf("the session's agent did not start: %w", err))
		}
		time.Sleep(5 * time.Millisecond)
	}
	return s, nil
}

// Run starts cmd in the session.
func (s *Session) Run(ctx context.Context, cmd *sandbox.Cmd) (sandbox.Process, error) {
	if len(cmd.Args) == 0 {
		return nil, errors.New("no command given")
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, sandbox.ErrClosed
	}
	req := &agent.Request{Args: cmd.Args, Dir: cmd.Dir, TTY: cmd.TTY, Rows: cmd.Rows, Cols: cmd.Cols, Stdin: cmd.Stdin != nil}
	if cmd.Env != nil {
		req.Env, req.Clearenv = cmd.Env, true
	}
	if req.Dir == "" && s.sb.spec.Access != sandbox.AccessNone && s.sb.spec.Workspace != "" {
		req.Dir = s.sb.spec.Workspace
	}
	x, err := agent.StartExec(ctx, s.sock, req)
	if err != nil {
		return nil, fmt.Errorf("reaching the session: %w", err)
	}
	p := &sessionProcess{x: x, start: time.Now(), timeout: cmd.Timeout, limits: s.sb.spec.Limits, done: make(chan struct{})}
	started := make(chan struct{})
	var once sync.Once
	go func() {
		p.exit, p.err = x.Wait(cmd.Stdout, cmd.Stderr, func(string) { once.Do(func() { close(started) }) })
		p.end = time.Now()
		x.Close()
		close(p.done)
	}()
	select {
	case <-started:
	case <-p.done:
		// It never started: not found, not executable.
		if p.err != nil {
			return nil, p.err
		}
		switch e := p.exit; {
		case e.NotFound:
			return nil, &sandbox.ExecError{Name: cmd.Args[0], Err: fs.ErrNotExist}
		case e.NotExecutable:
			return nil, &sandbox.ExecError{Name: cmd.Args[0], Err: fs.ErrPermission}
		case e.BadDir:
			return nil, &sandbox.SpecError{Field: "workdir", Err: errors.New(e.Error)}
		case e.Error != "":
			return nil, errors.New(e.Error)
		}
		return p, nil
	}
	if cmd.Stdin != nil {
		go func() {
			w := x.Stdin()
			buf := make([]byte, 32<<10)
			for {
				n, err := cmd.Stdin.Read(buf)
				if n > 0 {
					if _, werr := w.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					w.Close()
					return
				}
			}
		}()
	}
	if cmd.Timeout > 0 {
		p.timer = time.AfterFunc(cmd.Timeout, func() {
			p.timedOut.Store(true)
			x.Signal(syscall.SIGKILL)
		})
	}
	if ctx.Done() != nil {
		go func() {
			select {
			case <-ctx.Done():
				x.Signal(syscall.SIGKILL)
			case <-p.done:
			}
		}()
	}
	return p, nil
}

// ForwardPort forwards hostAddr to port on the sandbox's loopback.
func (s *Session) ForwardPort(hostAddr string, port int) (net.Listener, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, sandbox.ErrClosed
	}
	l, err := agent.Forward(s.sock, hostAddr, port)
	if err != nil {
		return nil, err
	}
	s.fwd = append(s.fwd, l)
	return l, nil
}

// Close ends everything in the session and removes what it made.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for _, l := range s.fwd {
		l.Close()
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err := agent.Call(ctx, s.sock, &agent.Request{Op: "stop"})
	cancel()
	if err != nil {
		s.proc.Kill()
	}
	done := make(chan struct{})
	go func() { s.proc.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		s.proc.Kill()
		<-done
	}
	s.sb.Close()
	return os.RemoveAll(s.dir)
}

// sessionProcess is a command running in a session.
type sessionProcess struct {
	x        *agent.Conn
	start    time.Time
	end      time.Time
	timeout  time.Duration
	limits   sandbox.Limits
	timer    *time.Timer
	timedOut atomic.Bool
	done     chan struct{}
	exit     *agent.Exit
	err      error
}

func (p *sessionProcess) Wait() (*sandbox.Result, error) {
	<-p.done
	if p.timer != nil {
		p.timer.Stop()
	}
	if p.err != nil {
		return nil, p.err
	}
	r := &sandbox.Result{ExitCode: p.exit.Code, Duration: p.end.Sub(p.start), Limits: p.limits, Timeout: p.timeout, Reason: sandbox.ReasonExited}
	if p.exit.Signal != 0 {
		r.Signal, r.Reason = syscall.Signal(p.exit.Signal), sandbox.ReasonSignaled
	}
	if p.timedOut.Load() {
		r.ExitCode, r.Reason, r.Signal = sandbox.ExitCodeTimeout, sandbox.ReasonTimeout, syscall.SIGKILL
		r.LimitsHit = append(r.LimitsHit, sandbox.LimitTimeout)
	}
	return r, nil
}

func (p *sessionProcess) Signal(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return errors.New("unsupported signal type")
	}
	return p.x.Signal(s)
}

func (p *sessionProcess) Resize(rows, cols uint16) error { return p.x.Resize(rows, cols) }
