package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pinfold/pinfold/sandbox"
)

// Session is the host's side of a sandbox whose command is the agent
// (sandbox.Session): every Run is an exec through the agent's socket,
// ForwardPort a connect through it, and Close asks the agent to stop. The
// runtimes' sessions (sandbox/native, sandbox/kubernetes) start the agent
// their own way and wrap this.
type Session struct {
	sock    string
	dir     string // the commands' default directory
	limits  sandbox.Limits
	proc    sandbox.Process
	cleanup func() error

	mu     sync.Mutex
	closed bool
	fwd    []net.Listener
}

// NewSession waits until the agent proc, started with its socket at sock,
// answers (or ctx ends, or about ten seconds pass). dir is the commands'
// default directory, limits the sandbox's (reported in results); cleanup,
// run by Close after the agent ended, removes what the runtime made.
func NewSession(ctx context.Context, sock string, proc sandbox.Process, dir string, limits sandbox.Limits, cleanup func() error) (*Session, error) {
	for i := 0; ; i++ {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := Call(cctx, sock, &Request{Op: "ping"})
		cancel()
		if err == nil {
			break
		}
		if i == 2000 || ctx.Err() != nil {
			return nil, fmt.Errorf("the session's agent did not start: %w", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return &Session{sock: sock, dir: dir, limits: limits, proc: proc, cleanup: cleanup}, nil
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
	req := &Request{Args: cmd.Args, Dir: cmd.Dir, TTY: cmd.TTY, Rows: cmd.Rows, Cols: cmd.Cols, Stdin: cmd.Stdin != nil}
	if cmd.Env != nil {
		req.Env, req.Clearenv = cmd.Env, true
	}
	if req.Dir == "" {
		req.Dir = s.dir
	}
	x, err := StartExec(ctx, s.sock, req)
	if err != nil {
		return nil, fmt.Errorf("reaching the session: %w", err)
	}
	p := &sessionProcess{x: x, start: time.Now(), timeout: cmd.Timeout, limits: s.limits, done: make(chan struct{})}
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
	l, err := Forward(s.sock, hostAddr, port)
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
	_, err := Call(ctx, s.sock, &Request{Op: "stop"})
	cancel()
	if err != nil {
		s.proc.Signal(syscall.SIGKILL)
	}
	done := make(chan struct{})
	go func() { s.proc.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		s.proc.Signal(syscall.SIGKILL)
		<-done
	}
	if s.cleanup != nil {
		return s.cleanup()
	}
	return nil
}

// sessionProcess is a command running in a session.
type sessionProcess struct {
	x        *Conn
	start    time.Time
	end      time.Time
	timeout  time.Duration
	limits   sandbox.Limits
	timer    *time.Timer
	timedOut atomic.Bool
	done     chan struct{}
	exit     *Exit
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
