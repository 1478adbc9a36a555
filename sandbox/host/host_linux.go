package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"
	"github.com/pinfold/pinfold/sandbox"
	"golang.org/x/sys/unix"
)

// New returns a "sandbox" that runs commands on the host, in spec's
// workspace.
func (r Runtime) New(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if spec.Network == "" {
		spec.Network = sandbox.NetworkHost
	}
	if spec.Access == "" {
		spec.Access = sandbox.AccessReadWrite
	}
	f := r.Features()
	if err := f.Supports(Name, &spec, nil); err != nil {
		return nil, err
	}
	return &Sandbox{spec: spec}, nil
}

// Sandbox runs commands on the host.
type Sandbox struct {
	spec   sandbox.Spec
	closed atomic.Bool
}

// Close does nothing: nothing was prepared.
func (s *Sandbox) Close() error {
	s.closed.Store(true)
	return nil
}

// Run starts cmd on the host. Without a terminal the command gets its own
// process group, which Signal signals, unless its stdin is the caller's
// terminal: then it stays in the caller's group, where the terminal's
// Ctrl-C reaches it directly (SharesTerminal reports it).
func (s *Sandbox) Run(ctx context.Context, cmd *sandbox.Cmd) (sandbox.Process, error) {
	if s.closed.Load() {
		return nil, sandbox.ErrClosed
	}
	if len(cmd.Args) == 0 {
		return nil, errors.New("no command given")
	}
	f := Runtime{}.Features()
	if err := f.Supports(Name, &s.spec, cmd); err != nil {
		return nil, err
	}
	env := cmd.Env
	if env == nil {
		env = []string{}
	}
	path, err := lookPath(cmd.Args[0], env)
	if err != nil {
		return nil, &sandbox.ExecError{Name: cmd.Args[0], Err: err}
	}
	dir := cmd.Dir
	if dir == "" {
		dir = s.spec.Workspace
	}
	c := &exec.Cmd{Path: path, Args: cmd.Args, Env: env, Dir: dir}
	p := &Process{cmd: c, done: make(chan struct{})}
	if cmd.TTY {
		rows, cols := cmd.Rows, cmd.Cols
		if rows == 0 || cols == 0 {
			rows, cols = 24, 80
		}
		ptmx, err := pty.StartWithSize(c, &pty.Winsize{Rows: rows, Cols: cols})
		if err != nil {
			return nil, startError(cmd.Args[0], err)
		}
		p.pty = ptmx
		if cmd.Stdout != nil {
			p.ttyOut = make(chan struct{})
			go func() {
				io.Copy(cmd.Stdout, ptmx)
				close(p.ttyOut)
			}()
		}
		if cmd.Stdin != nil {
			go io.Copy(ptmx, cmd.Stdin)
		}
	} else {
		c.Stdin, c.Stdout, c.Stderr = cmd.Stdin, cmd.Stdout, cmd.Stderr
		if f, ok := cmd.Stdin.(*os.File); ok && isTerminal(f) {
			p.sharesTerminal = true
		} else {
			c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		}
		if err := c.Start(); err != nil {
			return nil, startError(cmd.Args[0], err)
		}
	}
	p.start = time.Now()
	if cmd.Timeout > 0 {
		p.timer = time.AfterFunc(cmd.Timeout, func() {
			p.timedOut.Store(true)
			p.kill()
		})
	}
	if ctx.Done() != nil {
		go func() {
			select {
			case <-ctx.Done():
				p.kill()
			case <-p.done:
			}
		}()
	}
	p.timeout = cmd.Timeout
	return p, nil
}

func startError(name string, err error) error {
	var ee *exec.Error
	if errors.As(err, &ee) {
		return &sandbox.ExecError{Name: name, Err: ee.Err}
	}
	var pe *os.PathError
	if errors.As(err, &pe) && (errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission)) {
		return &sandbox.ExecError{Name: name, Err: pe.Err}
	}
	return err
}

// Process is a command running on the host.
type Process struct {
	cmd            *exec.Cmd
	pty            *os.File
	ttyOut         chan struct{}
	sharesTerminal bool
	start          time.Time
	timeout        time.Duration
	timer          *time.Timer
	timedOut       atomic.Bool
	done           chan struct{}
	once           sync.Once
	res            *sandbox.Result
	err            error
}

// SharesTerminal reports whether the command is in the caller's process
// group on the caller's terminal: the terminal's Ctrl-C reaches it
// directly, so a caller must not forward SIGINT or SIGQUIT as well.
func (p *Process) SharesTerminal() bool { return p.sharesTerminal }

// Signal sends sig to the command (its process group, when it has one of
// its own).
func (p *Process) Signal(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return errors.New("unsupported signal type")
	}
	if p.sharesTerminal {
		return p.cmd.Process.Signal(s)
	}
	return unix.Kill(-p.cmd.Process.Pid, s)
}

func (p *Process) kill() {
	if p.sharesTerminal {
		p.cmd.Process.Kill()
		return
	}
	unix.Kill(-p.cmd.Process.Pid, unix.SIGKILL)
}

// Resize changes the size of the command's terminal.
func (p *Process) Resize(rows, cols uint16) error {
	if p.pty == nil {
		return errors.New("the command has no terminal")
	}
	return pty.Setsize(p.pty, &pty.Winsize{Rows: rows, Cols: cols})
}

// Wait waits for the command and reports how it ended.
func (p *Process) Wait() (*sandbox.Result, error) {
	p.once.Do(func() { p.res, p.err = p.wait() })
	return p.res, p.err
}

func (p *Process) wait() (*sandbox.Result, error) {
	err := p.cmd.Wait()
	close(p.done)
	if p.timer != nil {
		p.timer.Stop()
	}
	if p.ttyOut != nil {
		select {
		case <-p.ttyOut:
		case <-time.After(2 * time.Second):
		}
	}
	if p.pty != nil {
		p.pty.Close()
	}
	r := &sandbox.Result{Duration: time.Since(p.start), Timeout: p.timeout}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return nil, err
	}
	ws, _ := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case p.timedOut.Load():
		r.ExitCode, r.Reason, r.Signal = sandbox.ExitCodeTimeout, sandbox.ReasonTimeout, syscall.SIGKILL
		r.LimitsHit = append(r.LimitsHit, sandbox.LimitTimeout)
	case ws.Signaled():
		r.Signal = ws.Signal()
		r.ExitCode, r.Reason = 128+int(r.Signal), sandbox.ReasonSignaled
	default:
		r.ExitCode, r.Reason = ws.ExitStatus(), sandbox.ReasonExited
	}
	return r, nil
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// lookPath finds name in the PATH of env (the command's, not pinfold's).
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := ""
	for _, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			path = kv[5:]
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("no such executable in the PATH it is given: %w", fs.ErrNotExist)
}
