package gvisor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/internal/agent"
	"github.com/pinfold/pinfold/internal/cgroup"
	"github.com/pinfold/pinfold/internal/netpolicy"
	"github.com/pinfold/pinfold/internal/store"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/container"
	"github.com/pinfold/pinfold/sandbox/internal/netconf"
)

// Dir holds the runs' bundles and runsc's state, one directory per
// sandbox named after its pinfold process (container.Owner), so that
// Clean can tell what a killed run left.
var Dir = "/run/pinfold-gvisor"

// New prepares a sandbox: the base's root, the skeleton and the
// caller's directories idmapped.
func (r *Runtime) New(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if err := spec.Normalize(); err != nil {
		return nil, err
	}
	f := r.Features()
	if err := f.Supports(Name, &spec, nil); err != nil {
		return nil, err
	}
	if err := r.Check(ctx, &spec); err != nil {
		return nil, err
	}
	s := &Sandbox{rt: r, spec: spec}
	if err := s.setup(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Sandbox is a prepared bundle layout; each Run is a new runsc sandbox.
type Sandbox struct {
	rt      *Runtime
	spec    sandbox.Spec
	dir     string // Dir/OWNER-ID: the skeleton, bundles, runsc's state
	lay     layout
	ids     *container.IDMounts
	release func()            // lets the store's collector have the base again
	cgsys   *cgroup.System    // nil without limits
	cglim   cgroup.Limits     // the host group's limits (hostLimits)
	net     *netpolicy.Config // pinfold's network stack's, or nil (none)
	session bool              // a session's agent runs here (RunDir is bound)
	closed  atomic.Bool
	cleaned sync.Once
	mu      sync.Mutex
	running int // processes not yet waited for
}

func (s *Sandbox) setup(ctx context.Context) error {
	// The sandbox's ids traverse Dir to their bundle; the shared root is
	// runsc's alone.
	if err := os.MkdirAll(Dir, 0o711); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(Dir, sharedRoot), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	dir := filepath.Join(Dir, container.Owner()+"-"+randomID())
	if err := os.Mkdir(dir, 0o711); err != nil {
		return err
	}
	s.dir = dir
	if err := s.limits(); err != nil {
		return err
	}
	for _, m := range s.spec.Mounts {
		s.session = s.session || m.Target == agent.RunDir && !m.ReadOnly
	}
	cfg, err := netconf.Config(&s.spec)
	if err != nil {
		return err
	}
	s.net = cfg
	base, names := "/", sandbox.HostSystemDirs()
	if s.spec.Base.Kind != sandbox.BaseHost {
		base = s.spec.Base.Path
		if s.spec.Base.Kind != sandbox.BaseDir {
			var err error
			if base, err = s.storeBase(ctx); err != nil {
				return err
			}
		}
		ents, err := os.ReadDir(base)
		if err != nil {
			return &sandbox.SpecError{Field: "base", Err: err}
		}
		names = names[:0]
		for _, e := range ents {
			names = append(names, e.Name())
		}
	}
	owner := [2]uint32{0, 0}
	if fi, err := os.Stat(s.spec.Workspace); s.spec.Workspace != "" && err == nil {
		st := fi.Sys().(*syscall.Stat_t)
		owner = [2]uint32{st.Uid, st.Gid}
	}
	s.ids = container.NewIDMounts(owner[0], owner[1])
	return s.prepare(dir, base, names)
}

// storeBase unpacks (or finds) the spec's tar, debian-12 or image-file
// base in pinfold's store and returns its root (store.SpecBase).
func (s *Sandbox) storeBase(ctx context.Context) (string, error) {
	if b := s.spec.Base; b.Kind == sandbox.BaseOCI && b.Path == "" {
		return s.pulledBase(ctx)
	}
	root, release, err := store.SpecBase(ctx, s.rt.store, s.spec.Base)
	if err != nil {
		return "", err
	}
	s.release = release
	return root, nil
}

// pulledBase pulls (or finds) an oci base given by a registry reference
// into the store, as the native runtime does (skopeo; a reference pulled
// once is used from the store from then on).
func (s *Sandbox) pulledBase(ctx context.Context) (string, error) {
	dir := s.rt.store
	if dir == "" {
		d, err := store.DefaultDir()
		if err != nil {
			return "", &sandbox.SpecError{Field: "store", Err: err}
		}
		dir = d
	}
	st, err := store.Open(dir)
	if err != nil {
		return "", &sandbox.SpecError{Field: "store", Err: err}
	}
	b, err := st.PullBase(ctx, s.spec.Base.Ref, store.ImportOptions{UIDShift: store.Shift()}, false)
	if err != nil {
		return "", &sandbox.SpecError{Field: "base", Err: err}
	}
	s.release = store.UseBase(b.Root)
	return b.Root, nil
}

// Close releases the idmapped mounts, the base and the sandbox's
// directory, once the commands still running have ended (their runsc
// needs its state and bundle until then).
func (s *Sandbox) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.mu.Lock()
	idle := s.running == 0
	s.mu.Unlock()
	if idle {
		return s.cleanup()
	}
	return nil
}

// ended is called by each process's Wait.
func (s *Sandbox) ended() {
	s.mu.Lock()
	s.running--
	idle := s.running == 0
	s.mu.Unlock()
	if idle && s.closed.Load() {
		s.cleanup()
	}
}

func (s *Sandbox) cleanup() error {
	var err error
	s.cleaned.Do(func() {
		if s.ids != nil {
			s.ids.Release()
		}
		if s.release != nil {
			s.release()
		}
		if s.dir != "" {
			err = removeTree(s.dir)
		}
	})
	return err
}

// removeTree removes a sandbox's directory, which holds only what
// pinfold made (empty mount points, bundles, runsc's state), never
// following a mount: one still mounted fails the removal.
func removeTree(dir string) error {
	for _, p := range mountPointsUnder(dir) {
		unix.Unmount(p, unix.MNT_DETACH)
	}
	if len(mountPointsUnder(dir)) > 0 {
		return fmt.Errorf("%s still has mounts", dir)
	}
	return os.RemoveAll(dir)
}

// mountPointsUnder lists the mount points below dir, the deepest first.
func mountPointsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var ps []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 5 && strings.HasPrefix(f[4], dir+"/") {
			ps = append(ps, f[4])
		}
	}
	for i, j := 0, len(ps)-1; i < j; i, j = i+1, j-1 {
		ps[i], ps[j] = ps[j], ps[i]
	}
	return ps
}

// Run starts cmd in a new runsc sandbox.
func (s *Sandbox) Run(ctx context.Context, cmd *sandbox.Cmd) (sandbox.Process, error) {
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return nil, sandbox.ErrClosed
	}
	s.running++
	s.mu.Unlock()
	p, err := s.run(ctx, cmd)
	if err != nil {
		s.ended()
		return nil, err
	}
	return p, nil
}

func (s *Sandbox) run(ctx context.Context, cmd *sandbox.Cmd) (*Process, error) {
	if len(cmd.Args) == 0 {
		return nil, errors.New("no command given")
	}
	f := s.rt.Features()
	if err := f.Supports(Name, &s.spec, cmd); err != nil {
		return nil, err
	}
	cg, cgpath, err := s.group()
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Process, error) {
		if cg != nil {
			cg.Remove()
		}
		return nil, err
	}
	id := "pinfold-" + randomID()
	bundle := filepath.Join(s.dir, id)
	if err := os.Mkdir(bundle, 0o700); err != nil {
		return fail(err)
	}
	var nw *network
	if s.net != nil {
		if nw, err = s.startNetwork(ctx, s.net, bundle); err != nil {
			removeTree(bundle)
			return fail(err)
		}
	}
	fail = func(err error) (*Process, error) {
		if nw != nil {
			nw.close()
		}
		removeTree(bundle)
		if cg != nil {
			cg.Remove()
		}
		return nil, err
	}
	cfg, err := s.config(cmd, cgpath, nw)
	if err != nil {
		return fail(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), cfg, 0o600); err != nil {
		return fail(err)
	}
	state := filepath.Join(s.dir, "state")
	p := &Process{runsc: s.rt.runsc, state: state, id: id, bundle: bundle, done: make(chan struct{}), timeout: cmd.Timeout, cg: cg, limits: s.spec.Limits, net: nw, session: s.session}
	run := []string{"run", "--bundle", bundle}
	var console *net.UnixListener
	if cmd.TTY {
		// runsc sends the terminal's master end to this socket.
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(bundle, "console"), Net: "unix"})
		if err != nil {
			return fail(err)
		}
		console = l
		run = append(run, "--console-socket", filepath.Join(bundle, "console"))
	}
	c := exec.Command(s.rt.runsc, p.global(append(run, id)...)...)
	p.errs = &runscErrors{w: cmd.Stderr}
	c.Stderr = p.errs
	if !cmd.TTY {
		c.Stdin, c.Stdout = cmd.Stdin, cmd.Stdout
	} else {
		p.errs.w = cmd.Stdout // runsc's own messages; the command has the terminal
	}
	// runsc run is attached: its sandbox and gofer die with it, and it
	// dies with this thread's process.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := c.Start(); err != nil {
		return fail(fmt.Errorf("starting runsc: %w", err))
	}
	p.cmd = c
	p.start = time.Now()
	if console != nil {
		if err := p.terminal(console, cmd); err != nil {
			p.kill()
			p.Wait() // Run's caller ends it as a failed start
			return nil, err
		}
	}
	p.sb = s
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
				p.killed.Store(true)
				p.kill()
			case <-p.done:
			}
		}()
	}
	return p, nil
}

// Process is a command running under runsc.
type Process struct {
	runsc, state, id, bundle string
	sb                       *Sandbox
	cg                       *cgroup.Group // the limits' host group, or nil
	net                      *network      // pinfold's network, or nil
	session                  bool          // Sandbox.session
	limits                   sandbox.Limits
	cmd                      *exec.Cmd
	errs                     *runscErrors
	pty                      *os.File // the terminal's master end (Cmd.TTY)
	ttyOut                   chan struct{}
	start                    time.Time
	timeout                  time.Duration
	timer                    *time.Timer
	timedOut, killed         atomic.Bool
	done                     chan struct{}
	once                     sync.Once
	res                      *sandbox.Result
	err                      error
}

// global returns runsc's arguments: its flags, then args.
func (p *Process) global(args ...string) []string {
	mode := "--network=none" // loopback only
	if p.net != nil {
		mode = "--network=sandbox" // the Sentry's stack on the bundle's namespace
	}
	// The shared root keeps the empty network namespace runsc gives its
	// gofers, made once rather than for every run.
	g := []string{"--root", p.state, "--shared-root", filepath.Join(Dir, sharedRoot), mode, "--platform=" + Platform, "--overlay2=none"}
	if p.cg == nil {
		// No limits: runsc would make (and remove) a group of its own in
		// every hierarchy, which bounds nothing.
		g = append(g, "--ignore-cgroups")
	}
	if p.session {
		// The session's agent listens on a socket in its bound run
		// directory, which the host connects to: bind() there makes a
		// host socket (the gofer creates it), never connect() to one.
		g = append(g, "--host-uds=create")
	}
	if d := os.Getenv(DebugEnv); d != "" {
		g = append(g, "--debug", "--debug-log="+d+"/")
	}
	return append(g, args...)
}

// sharedRoot is runsc's state shared by every sandbox, in Dir.
const sharedRoot = "shared"

// DebugEnv names a directory that receives runsc's debug logs.
const DebugEnv = "PINFOLD_RUNSC_DEBUG"

// Signal sends sig to every process of the sandbox.
func (p *Process) Signal(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return errors.New("unsupported signal type")
	}
	if s == syscall.SIGKILL {
		p.kill()
		return nil
	}
	out, err := exec.Command(p.runsc, p.global("kill", "--all", p.id, strconv.Itoa(int(s)))...).CombinedOutput()
	if err != nil {
		select {
		case <-p.done:
			return nil // it ended meanwhile
		default:
		}
		return fmt.Errorf("runsc kill: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// kill ends runsc run, whose sandbox dies with it.
func (p *Process) kill() { unix.Kill(-p.cmd.Process.Pid, unix.SIGKILL) }

// terminal receives the master end of the command's terminal from runsc
// and connects it to cmd's streams.
func (p *Process) terminal(l *net.UnixListener, cmd *sandbox.Cmd) error {
	defer l.Close()
	exited := make(chan struct{})
	go func() { // runsc failing before it sends the terminal: wait
		// without reaping it, which Wait does
		var info unix.Siginfo
		for unix.Waitid(unix.P_PID, p.cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil) == unix.EINTR {
		}
		close(exited)
	}()
	type got struct {
		f   *os.File
		err error
	}
	ch := make(chan got, 1)
	go func() {
		f, err := receiveFile(l)
		ch <- got{f, err}
	}()
	var g got
	select {
	case g = <-ch:
	case <-exited:
		l.Close()
		g = <-ch
		if g.err == nil {
			g.f.Close()
		}
		return fmt.Errorf("runsc ended before it made the terminal: %s", p.errs.failed())
	case <-time.After(30 * time.Second):
		return errors.New("runsc did not send the terminal within 30s")
	}
	if g.err != nil {
		return fmt.Errorf("receiving the terminal from runsc: %w", g.err)
	}
	p.pty = g.f
	// runsc leaves the terminal's size at 0x0 (consoleSize is not read).
	if cmd.Rows > 0 && cmd.Cols > 0 {
		p.Resize(cmd.Rows, cmd.Cols)
	}
	if cmd.Stdout != nil {
		p.ttyOut = make(chan struct{})
		go func() {
			io.Copy(cmd.Stdout, p.pty)
			close(p.ttyOut)
		}()
	}
	if cmd.Stdin != nil {
		go io.Copy(p.pty, cmd.Stdin)
	}
	return nil
}

// receiveFile accepts one connection on l and reads the descriptor it
// carries.
func receiveFile(l *net.UnixListener) (*os.File, error) {
	c, err := l.AcceptUnix()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	buf := make([]byte, 64)
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("no descriptor in runsc's message (%v)", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return nil, fmt.Errorf("no descriptor in runsc's message (%v)", err)
	}
	return os.NewFile(uintptr(fds[0]), "pty master"), nil
}

// Resize changes the size of the command's terminal.
func (p *Process) Resize(rows, cols uint16) error {
	if p.pty == nil {
		return errors.New("the command has no terminal")
	}
	return unix.IoctlSetWinsize(int(p.pty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
}

// Wait waits for the command and reports how it ended.
func (p *Process) Wait() (*sandbox.Result, error) {
	p.once.Do(func() { p.res, p.err = p.wait() })
	return p.res, p.err
}

func (p *Process) wait() (*sandbox.Result, error) {
	err := p.cmd.Wait()
	p.errs.flush()
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
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		// runsc run destroys its container when it ends, unless it was
		// killed (a timeout, a cancel): then its state is removed here.
		exec.Command(p.runsc, p.global("delete", "--force", p.id)...).Run()
	}
	var violations []sandbox.Violation
	if p.net != nil {
		// Closed first: the helper's last reports may be in flight.
		p.net.close()
		violations = p.net.violations()
	}
	removeTree(p.bundle)
	var stats cgroup.Stats
	if p.cg != nil {
		// runsc, its Sentry and gofer have left the group by now.
		stats, _ = p.cg.Stats()
		p.cg.Remove()
		removeGroups(p.cg.Name())
	}
	if p.sb != nil {
		p.sb.ended()
	}
	r := &sandbox.Result{Duration: time.Since(p.start), Timeout: p.timeout, Limits: p.limits, Violations: violations}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return nil, err
	}
	ws, _ := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	code := ws.ExitStatus()
	switch {
	case p.timedOut.Load():
		r.ExitCode, r.Reason, r.Signal = sandbox.ExitCodeTimeout, sandbox.ReasonTimeout, syscall.SIGKILL
		r.LimitsHit = append(r.LimitsHit, sandbox.LimitTimeout)
	case ws.Signaled():
		r.ExitCode, r.Reason, r.Signal = 128+int(ws.Signal()), sandbox.ReasonKilled, ws.Signal()
	case code == 128 && p.errs.failed() != "" && stats.OOMKills > 0:
		// The memory limit killed the Sentry while it started: the
		// limit is below what gVisor itself needs (some 20 MiB).
		r.ExitCode, r.Reason, r.Signal = 128+int(syscall.SIGKILL), sandbox.ReasonKilled, syscall.SIGKILL
	case code == 128 && p.errs.failed() != "":
		return nil, p.errs.err()
	case code > 128 && code < 128+65:
		// runsc reports a command killed by signal N as 128+N.
		r.ExitCode, r.Reason, r.Signal = code, sandbox.ReasonSignaled, syscall.Signal(code-128)
	default:
		r.ExitCode, r.Reason = code, sandbox.ReasonExited
	}
	hit(r, stats)
	return r, nil
}

// runscErrors passes stderr on, except runsc's own fatal line ("running
// container: ..."), which it keeps for Wait. A line that may still become
// that one is held until it ends (at most 64 KiB).
type runscErrors struct {
	w    io.Writer
	mu   sync.Mutex
	mid  bool   // the last byte passed on was not a newline
	line []byte // the start of a line that may be runsc's
	last string
}

const runscFatal = "running container: "

func mayBeFatal(l []byte) bool {
	return bytes.HasPrefix(l, []byte(runscFatal)) || bytes.HasPrefix([]byte(runscFatal), l)
}

func (e *runscErrors) Write(b []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		chunk := b
		if i >= 0 {
			chunk = b[:i+1]
		}
		b = b[len(chunk):]
		if e.mid {
			e.pass(chunk)
			continue
		}
		e.line = append(e.line, chunk...)
		switch {
		case !mayBeFatal(e.line) || len(e.line) > 64<<10:
			e.pass(e.line)
			e.line = nil
		case i >= 0:
			e.last = string(bytes.TrimSuffix(e.line, []byte("\n")))
			e.line = nil
		}
	}
	return n, nil
}

// flush passes on a held line the output ended in.
func (e *runscErrors) flush() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.line) > 0 {
		e.pass(e.line)
		e.line = nil
	}
}

func (e *runscErrors) pass(b []byte) {
	if e.w != nil {
		e.w.Write(b)
	}
	e.mid = b[len(b)-1] != '\n'
}

func (e *runscErrors) failed() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.last
}

// err turns runsc's line into an ExecError when the command could not
// be executed.
func (e *runscErrors) err() error {
	line := e.failed()
	if name, ok := between(line, `error finding executable "`, `"`); ok {
		return &sandbox.ExecError{Name: name, Err: fs.ErrNotExist}
	}
	if name, ok := between(line, "failed to load ", ": "); ok {
		switch {
		case strings.HasSuffix(line, "permission denied"):
			return &sandbox.ExecError{Name: name, Err: fs.ErrPermission}
		case strings.HasSuffix(line, "no such file or directory"):
			return &sandbox.ExecError{Name: name, Err: fs.ErrNotExist}
		}
	}
	return fmt.Errorf("runsc could not run the sandbox: %s", strings.TrimPrefix(line, runscFatal))
}

func between(s, from, to string) (string, bool) {
	_, rest, ok := strings.Cut(s, from)
	if !ok {
		return "", false
	}
	v, _, ok := strings.Cut(rest, to)
	return v, ok
}

func randomID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}
