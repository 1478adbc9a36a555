package kubernetes

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/internal/kube"
	"github.com/pinfold/pinfold/sandbox"
)

// Run starts the helper for cmd and returns once the pod runs and the
// command is being started in it (or why it could not be).
func (s *Sandbox) Run(ctx context.Context, cmd *sandbox.Cmd) (sandbox.Process, error) {
	if len(cmd.Args) == 0 {
		return nil, errors.New("no command given")
	}
	f := s.rt.Features()
	if err := f.Supports(Name, &s.spec, cmd); err != nil {
		return nil, err
	}
	req, err := s.request(ctx, cmd)
	if err != nil {
		return nil, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "kube-control"), os.NewFile(uintptr(fds[1]), "kube-control")
	defer theirs.Close()
	c := exec.Command(s.rt.opt.Helper, "run")
	c.Env = s.rt.helperEnv()
	c.ExtraFiles = []*os.File{theirs}
	// Its own process group: the terminal's Ctrl-C goes to pinfold, which
	// forwards it as a signal to the command.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &Process{ctl: ours, enc: json.NewEncoder(ours), start: time.Now(), limits: s.spec.Limits, timeout: cmd.Timeout,
		trace: s.spec.Trace, name: cmd.Args[0], done: make(chan struct{})}
	// Stdin through a pipe of ours, closed when the command ends: a
	// reader that never ends must not hold Wait.
	if cmd.Stdin != nil {
		pr, pw, err := os.Pipe()
		if err != nil {
			ours.Close()
			return nil, err
		}
		c.Stdin = pr
		p.stdinW = pw
		defer pr.Close()
		go func() {
			io.Copy(pw, cmd.Stdin)
			p.closeStdin()
		}()
	}
	c.Stdout = cmd.Stdout
	if !cmd.TTY {
		c.Stderr = cmd.Stderr
	}
	if err := c.Start(); err != nil {
		ours.Close()
		p.closeStdin()
		return nil, err
	}
	p.cmd = c
	if err := p.enc.Encode(req); err != nil {
		p.abort()
		return nil, err
	}
	p.events = bufio.NewReader(ours)
	ev, err := p.next()
	if err != nil {
		p.abort()
		return nil, err
	}
	if !ev.Started {
		p.abort()
		return nil, eventError(ev, cmd.Args[0])
	}
	if cmd.Timeout > 0 {
		// The helper ends the pod at the timeout; this is its backstop.
		p.timer = time.AfterFunc(cmd.Timeout+30*time.Second, func() { p.kill() })
	}
	go func() {
		select {
		case <-ctx.Done():
			p.kill()
		case <-p.done:
		}
	}()
	return p, nil
}

// Process is a command running in a pod, served by a helper.
type Process struct {
	cmd     *exec.Cmd
	ctl     *os.File
	enc     *json.Encoder
	encm    sync.Mutex
	events  *bufio.Reader
	stdinW  *os.File
	stdinM  sync.Mutex
	start   time.Time
	limits  sandbox.Limits
	timeout time.Duration
	timer   *time.Timer
	trace   bool
	name    string // the command, for exec errors
	done    chan struct{}
	killed  atomic.Bool
	once    sync.Once
	res     *sandbox.Result
	err     error
}

func (p *Process) closeStdin() {
	p.stdinM.Lock()
	defer p.stdinM.Unlock()
	if p.stdinW != nil {
		p.stdinW.Close()
		p.stdinW = nil
	}
}

func (p *Process) next() (*kube.Event, error) {
	line, err := p.events.ReadBytes('\n')
	if err != nil {
		return nil, errHelper
	}
	var ev kube.Event
	if err := json.Unmarshal(line, &ev); err != nil {
		return nil, fmt.Errorf("the kubernetes helper said %q: %w", line, err)
	}
	return &ev, nil
}

func (p *Process) send(c kube.Control) error {
	p.encm.Lock()
	defer p.encm.Unlock()
	return p.enc.Encode(c)
}

// abort ends a helper that could not start the command: closing the
// socket makes it remove what it made.
func (p *Process) abort() {
	p.ctl.Close()
	p.closeStdin()
	p.cmd.Wait()
}

// kill ends the command: the helper, told by its socket closing, deletes
// the pod.
func (p *Process) kill() {
	p.killed.Store(true)
	p.cmd.Process.Signal(syscall.SIGTERM)
}

// Signal sends sig to the command's processes in the pod.
func (p *Process) Signal(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return errors.New("unsupported signal type")
	}
	if s == syscall.SIGKILL {
		p.kill()
		return nil
	}
	return p.send(kube.Control{Signal: int(s)})
}

// Resize changes the size of the command's terminal.
func (p *Process) Resize(rows, cols uint16) error {
	return p.send(kube.Control{Rows: rows, Cols: cols})
}

// Wait waits for the command; the pod is being deleted when it returns.
func (p *Process) Wait() (*sandbox.Result, error) {
	p.once.Do(func() { p.res, p.err = p.wait() })
	return p.res, p.err
}

func (p *Process) wait() (*sandbox.Result, error) {
	ev, err := p.next()
	p.ctl.Close()
	p.closeStdin()
	p.cmd.Wait()
	close(p.done)
	if p.timer != nil {
		p.timer.Stop()
	}
	if err != nil && p.killed.Load() {
		// Killed (SIGKILL, a cancelled context): the helper deleted the
		// pod without waiting for the command's status.
		return &sandbox.Result{ExitCode: 128 + int(syscall.SIGKILL), Signal: syscall.SIGKILL, Reason: sandbox.ReasonKilled,
			Duration: time.Since(p.start), Limits: p.limits, Timeout: p.timeout}, nil
	}
	if err != nil {
		return nil, err
	}
	if ev.Exit == nil {
		return nil, eventError(ev, p.name)
	}
	r := &sandbox.Result{Duration: time.Since(p.start), Limits: p.limits, Timeout: p.timeout}
	if p.trace {
		for _, st := range ev.Trace {
			r.Trace = append(r.Trace, sandbox.TracePoint{Step: st.Step, Mono: st.Mono})
		}
	}
	code := ev.Exit.Code
	switch {
	case ev.Exit.TimedOut:
		r.ExitCode, r.Reason, r.Signal = sandbox.ExitCodeTimeout, sandbox.ReasonTimeout, syscall.SIGKILL
		r.LimitsHit = append(r.LimitsHit, sandbox.LimitTimeout)
	case ev.Exit.OOM:
		r.ExitCode, r.Reason, r.Signal = code, sandbox.ReasonOOM, syscall.SIGKILL
		r.LimitsHit = append(r.LimitsHit, sandbox.LimitMemory)
	case code > 128 && code < 128+65:
		// The container runtime reports a signal's death as 128+N.
		r.ExitCode, r.Reason, r.Signal = code, sandbox.ReasonSignaled, syscall.Signal(code-128)
	default:
		r.ExitCode, r.Reason = code, sandbox.ReasonExited
	}
	return r, nil
}

// ErrCluster is wrapped by failures of the cluster rather than the
// command.
var ErrCluster = errors.New("kubernetes cluster failed")

type clusterError struct{ msg string }

func (e *clusterError) Error() string { return "kubernetes: " + e.msg }
func (e *clusterError) Unwrap() error { return ErrCluster }

func eventError(ev *kube.Event, name string) error {
	switch ev.Kind {
	case kube.ErrNotFound:
		return &sandbox.ExecError{Name: name, Err: fs.ErrNotExist}
	case kube.ErrPermission:
		return &sandbox.ExecError{Name: name, Err: fs.ErrPermission}
	case kube.ErrSpec:
		return &sandbox.SpecError{Field: "kubernetes", Err: errors.New(ev.Error)}
	}
	if ev.Error == "" {
		return errHelper
	}
	return &clusterError{msg: ev.Error}
}
