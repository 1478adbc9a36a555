package container

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/internal/cgroup"
	"github.com/pinfold/pinfold/internal/procstat"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/internal/netconf"
)

// Run starts cmd in a new container.
func (s *Sandbox) Run(ctx context.Context, cmd *sandbox.Cmd) (sandbox.Process, error) {
	if len(cmd.Args) == 0 {
		return nil, errors.New("no command given")
	}
	f := s.rt.Features()
	if err := f.Supports(s.rt.engine, &s.spec, cmd); err != nil {
		return nil, err
	}
	name := "pinfold-" + randomID()
	args := []string{"run", "--name", name, "--label", Label + "=" + Owner(), "--sig-proxy=false"}
	args = append(args, s.rt.extra...)
	args = append(args, "--rm")
	var cg *cgroup.Group
	if l := s.spec.Limits; s.cgsys != nil {
		var err error
		cg, err = s.cgsys.New(Owner()+"-c"+randomID(), cgroup.Limits{MemoryBytes: l.Memory, Pids: l.Pids, CPUs: l.CPUs})
		if err != nil {
			return nil, fmt.Errorf("%w: %w", sandbox.ErrLimits, err)
		}
		args = append(args, "--cgroup-parent", "/pinfold/"+cg.Name())
	}
	args = append(args, s.args...)
	var nw *network
	if s.net != nil {
		var err error
		if nw, err = s.startNetwork(ctx, s.net); err != nil {
			if cg != nil {
				(&Process{cg: cg}).release()
			}
			return nil, err
		}
		args = append(args, nw.args()...)
	}
	switch {
	case nw != nil && len(s.userns) > 0:
		// The holder's user namespace (the same map) owns the network
		// namespace: in it, capabilities the command was given apply to
		// its network as natively.
		args = append(args, "--userns", "container:"+nw.holder)
	default:
		args = append(args, s.userns...)
	}
	dir := cmd.Dir
	if dir == "" {
		dir = s.spec.Workspace
	}
	if dir == "" {
		dir = "/"
	}
	args = append(args, "-w", dir)
	env := cmd.Env
	if env == nil {
		env = sandbox.DefaultEnv(&s.spec, cmd.TTY)
	}
	if p, ok, err := s.viaAPI(ctx, cmd, args, env, nw, cg); ok {
		return p, err
	}
	// The client runs in a private directory of the store, which Wait
	// removes: podman's conmon, started in the client's directory, writes
	// an "oom" file there when the kernel kills the command for memory,
	// and nothing may land in the caller's directory.
	wd, err := workDir(s.rt.store)
	if err != nil {
		(&Process{cg: cg, net: nw}).release()
		return nil, err
	}
	// Values go to the client in its environment or a private file, not
	// on its command line, where every user's ps would show them.
	clientEnv, envArgs, err := envFor(env, wd)
	if err != nil {
		(&Process{dir: wd, cg: cg, net: nw}).release()
		return nil, err
	}
	args = append(args, envArgs...)
	args = append(args, s.commandArgs(cmd)...)

	c := exec.Command(s.rt.bin, args...)
	c.Env, c.Dir = clientEnv, wd
	// The client goes with pinfold (the container then runs on until its
	// command ends, or pinfold clean removes it).
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &Process{rt: s.rt, name: name, dir: wd, net: nw, mark: imageMark(s.rt.store, s.rt.engine, s.image), cg: cg, done: make(chan struct{}), limits: s.spec.Limits, timeout: cmd.Timeout}
	if err := p.startClient(c, cmd); err != nil {
		p.release()
		return nil, err
	}
	p.cmd = c
	p.watch(ctx, cmd.Timeout)
	return p, nil
}

// commandArgs end the run's arguments with what depends on cmd besides
// its environment: its streams and terminal, the image, and the command
// line after tini's flags.
func (s *Sandbox) commandArgs(cmd *sandbox.Cmd) []string {
	var args []string
	if cmd.Stdin != nil || cmd.TTY {
		args = append(args, "-i")
	}
	if cmd.TTY {
		args = append(args, "-t")
	}
	if strings.Contains(s.image, "pinfold-skeleton:") {
		args = append(args, "--pull=never") // it is imported, never pulled
	}
	args = append(args, s.image, "-s", "-g", "--")
	if cmd.TTY && s.rt.engine == DockerName && s.stty && cmd.Rows > 0 && cmd.Cols > 0 {
		// docker 20.10's client sizes the terminal only once the command
		// runs, which may read 0x0 first: the size is set before it.
		args = append(args, "/bin/sh", "-c", fmt.Sprintf(`stty rows %d cols %d 2>/dev/null; exec "$@"`, cmd.Rows, cmd.Cols), "sh")
	}
	return append(args, cmd.Args...)
}

// startClient starts the engine's client c for cmd: on a new terminal,
// copied to and from cmd's streams, with cmd.TTY; else with cmd's
// streams, in a process group of its own.
func (p *Process) startClient(c *exec.Cmd, cmd *sandbox.Cmd) error {
	if !cmd.TTY {
		c.Stdin, c.Stdout = cmd.Stdin, cmd.Stdout
		p.stderr = &execSniffer{w: cmd.Stderr}
		c.Stderr = p.stderr
		// Its own process group: the terminal's Ctrl-C goes to pinfold,
		// which forwards it to the container, not to the client.
		c.SysProcAttr.Setpgid = true
		return c.Start()
	}
	rows, cols := cmd.Rows, cmd.Cols
	if rows == 0 || cols == 0 {
		rows, cols = 24, 80
	}
	ptmx, err := pty.StartWithSize(c, &pty.Winsize{Rows: rows, Cols: cols})
	if err != nil {
		return err
	}
	p.pty = ptmx
	p.out = make(chan struct{})
	go func() {
		if cmd.Stdout != nil {
			io.Copy(cmd.Stdout, ptmx)
		} else {
			io.Copy(io.Discard, ptmx)
		}
		close(p.out)
	}()
	if cmd.Stdin != nil {
		go io.Copy(ptmx, cmd.Stdin)
	}
	return nil
}

// Process is a command running in a container.
type Process struct {
	rt       *Runtime
	name     string
	dir      string // the client's directory, with its env file
	mark     string // the store's record of the skeleton image
	net      *network
	cg       *cgroup.Group // the container's parent, when limited
	cmd      *exec.Cmd     // the engine's client, or
	api      *apiRun       // the container, run through docker's API
	tty      bool          // on a terminal of the engine's (the API's runs)
	pty      *os.File
	out      chan struct{}
	stderr   *execSniffer
	start    time.Time
	limits   sandbox.Limits
	timeout  time.Duration
	timer    *time.Timer
	timedOut atomic.Bool
	done     chan struct{}
	once     sync.Once
	res      *sandbox.Result
	err      error
}

// Signal sends sig to the command's process group (tini forwards it).
func (p *Process) Signal(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return errors.New("unsupported signal type")
	}
	if p.api != nil {
		if err := call(context.Background(), p.api.sock, "POST", "/containers/"+p.name+"/kill?signal="+strconv.Itoa(int(s)), nil, nil); err != nil {
			return fmt.Errorf("%s kill: %w", p.rt.engine, err)
		}
		return nil
	}
	out, err := exec.Command(p.rt.bin, "kill", "--signal", strconv.Itoa(int(s)), p.name).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s kill: %v: %s", p.rt.engine, err, firstLine(string(out)))
	}
	return nil
}

// kill ends the container at once.
func (p *Process) kill() {
	if p.api != nil {
		call(context.Background(), p.api.sock, "POST", "/containers/"+p.name+"/kill", nil, nil)
		return
	}
	exec.Command(p.rt.bin, "kill", p.name).Run()
}

// Resize changes the size of the command's terminal: the client passes
// its own terminal's size on.
func (p *Process) Resize(rows, cols uint16) error {
	if p.api != nil && p.tty {
		return p.api.resize(rows, cols)
	}
	if p.pty == nil {
		return errors.New("the command has no terminal")
	}
	if err := pty.Setsize(p.pty, &pty.Winsize{Rows: rows, Cols: cols}); err != nil {
		return err
	}
	// A client still starting has not installed its SIGWINCH handler yet
	// (docker's does so once the container runs): tell it again.
	pid := p.cmd.Process.Pid
	for _, d := range []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, time.Second} {
		time.AfterFunc(d, func() {
			select {
			case <-p.done:
			default:
				unix.Kill(pid, unix.SIGWINCH)
			}
		})
	}
	return nil
}

// Wait waits for the command and reports how it ended. The container is
// gone when it returns.
func (p *Process) Wait() (*sandbox.Result, error) {
	p.once.Do(func() { p.res, p.err = p.wait() })
	return p.res, p.err
}

func (p *Process) wait() (*sandbox.Result, error) {
	var err error
	code := 0
	if p.api != nil {
		code, err = p.api.finish()
	} else {
		err = p.cmd.Wait()
		code = p.cmd.ProcessState.ExitCode()
	}
	close(p.done)
	if p.timer != nil {
		p.timer.Stop()
	}
	if p.out != nil {
		select {
		case <-p.out:
		case <-time.After(2 * time.Second):
		}
		p.pty.Close()
	}
	var stats cgroup.Stats
	if p.cg != nil {
		stats, _ = p.cg.Stats()
		v1Hits(p.cg.Name(), p.limits, &stats)
	}
	var violations []sandbox.Violation
	if p.net != nil && p.net.stack != nil {
		// Close first: the helper's last reports may still be in flight.
		p.net.close()
		violations = netconf.Violations(p.net.stack.Violations())
		if err := p.net.stack.Err(); err != nil {
			violations = append(violations, sandbox.Violation{Kind: "network", Reason: "the container had no network: " + err.Error()})
		}
	}
	p.release()
	if p.stderr != nil {
		p.stderr.flush()
	}
	r := &sandbox.Result{Duration: time.Since(p.start), Limits: p.limits, Timeout: p.timeout, Violations: violations}
	var ee *exec.ExitError
	if err != nil && p.api != nil {
		return nil, p.apiFailed(err)
	}
	if err != nil && !errors.As(err, &ee) {
		return nil, err
	}
	oom := stats.OOMKills > 0 && code == 128+int(syscall.SIGKILL)
	if stats.PidsMaxHits > 0 {
		r.LimitsHit = append(r.LimitsHit, sandbox.LimitPids)
	}
	switch {
	case p.timedOut.Load():
		r.ExitCode, r.Reason, r.Signal = sandbox.ExitCodeTimeout, sandbox.ReasonTimeout, syscall.SIGKILL
		r.LimitsHit = append(r.LimitsHit, sandbox.LimitTimeout)
	case oom:
		r.ExitCode, r.Reason, r.Signal = 128+int(syscall.SIGKILL), sandbox.ReasonOOM, syscall.SIGKILL
		r.LimitsHit = append(r.LimitsHit, sandbox.LimitMemory)
	case (code == 126 || code == 127) && p.stderr != nil && p.stderr.execErr != nil:
		return nil, &sandbox.ExecError{Name: p.stderr.execName, Err: p.stderr.execErr}
	case code == 125 && p.api == nil && p.stderr != nil && p.stderr.engineFailed():
		if p.mark != "" && strings.Contains(p.stderr.first, "pinfold-skeleton") {
			// The skeleton image was removed behind pinfold's back: the
			// next run imports it again.
			os.Remove(p.mark)
			return nil, &engineError{engine: p.rt.engine, detail: p.stderr.first + " (the next run imports the image again)"}
		}
		return nil, &engineError{engine: p.rt.engine, detail: p.stderr.first}
	case code > 128 && code < 128+65:
		r.ExitCode, r.Reason, r.Signal = code, sandbox.ReasonSignaled, syscall.Signal(code-128)
	default:
		r.ExitCode, r.Reason = code, sandbox.ReasonExited
	}
	return r, nil
}

// v1Hits adds what cgroup v1 counts only in the engine's group below
// ours (gone with the container) as ours sees it: memory use at the limit
// (Wait counts it as the OOM kill only with a SIGKILL status), the process
// count at its limit.
func v1Hits(name string, l sandbox.Limits, st *cgroup.Stats) {
	read := func(p string) int64 {
		b, err := os.ReadFile(p)
		if err != nil {
			return 0
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n
	}
	mem := "/sys/fs/cgroup/memory/pinfold/" + name
	// The kernel counts the OOM kill, and may count the failed charges, in
	// the engine's group; the parent's peak shows the limit was reached.
	if l.Memory > 0 && st.OOMKills == 0 && (read(mem+"/memory.failcnt")+read(mem+"/memory.memsw.failcnt") > 0 || st.MemoryPeak >= l.Memory-1<<20) {
		st.OOMKills = 1
	}
	if l.Pids > 0 && st.PidsMaxHits == 0 && read("/sys/fs/cgroup/pids/pinfold/"+name+"/pids.peak") >= l.Pids {
		st.PidsMaxHits = 1
	}
}

// release removes what Run made besides the container: the environment
// file and the limits' cgroup, with the directories the engine made
// under it in the hierarchies pinfold did not.
func (p *Process) release() {
	if p.dir != "" {
		os.RemoveAll(p.dir)
	}
	if p.net != nil {
		p.net.close()
		p.net = nil
	}
	if p.cg == nil {
		return
	}
	name := p.cg.Name()
	// The engine's groups below ours (the container's; podman's conmon)
	// may outlive the client by a second or so.
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/pinfold/" + name)
	dirs = append(dirs, "/sys/fs/cgroup/pinfold/"+name)
	deadline := time.Now().Add(10 * time.Second)
	for _, d := range dirs {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if !e.IsDir() {
				continue
			}
			sub := filepath.Join(d, e.Name())
			for unix.Rmdir(sub) == unix.EBUSY && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	p.cg.Remove()
	for _, d := range dirs {
		unix.Rmdir(d)
	}
	p.cg = nil
}

// execSniffer passes the command's stderr on, except tini's report that
// it could not execute the command, and the engine's own error, which
// it keeps for Wait.
type execSniffer struct {
	w        io.Writer
	started  bool
	head     []byte // held while it may be tini's line
	line     []byte // the first line, for Wait
	first    string
	execName string
	execErr  error
}

const tiniFatal = "[FATAL tini ("

func (s *execSniffer) Write(b []byte) (int, error) {
	n := len(b)
	if s.first == "" && len(s.line) < 4096 {
		s.line = append(s.line, b...)
		if i := bytes.IndexByte(s.line, '\n'); i >= 0 {
			s.first = string(s.line[:i])
		}
	}
	if !s.started {
		s.head = append(s.head, b...)
		h := s.head
		i := bytes.IndexByte(h, '\n')
		couldBeTini := bytes.HasPrefix(h, []byte(tiniFatal)) || bytes.HasPrefix([]byte(tiniFatal), h)
		if i < 0 && len(h) < 4096 && couldBeTini {
			return n, nil // it may still be tini's line
		}
		s.started = true
		b, s.head = h, nil
		if i >= 0 {
			if name, err, ok := parseTiniFatal(string(b[:i])); ok {
				s.execName, s.execErr = name, err
				b = b[i+1:]
			}
		}
	}
	if s.w == nil || len(b) == 0 {
		return n, nil
	}
	_, err := s.w.Write(b)
	return n, err
}

// flush passes on what is still held.
func (s *execSniffer) flush() {
	if !s.started && len(s.head) > 0 && s.w != nil {
		s.w.Write(s.head)
	}
	s.started, s.head = true, nil
}

// engineFailed reports an error line from the engine's client.
func (s *execSniffer) engineFailed() bool {
	return strings.HasPrefix(s.first, "Error") || strings.HasPrefix(s.first, "docker:")
}

// parseTiniFatal reads "[FATAL tini (7)] exec NAME failed: REASON".
func parseTiniFatal(line string) (string, error, bool) {
	if !strings.HasPrefix(line, tiniFatal) {
		return "", nil, false
	}
	_, rest, ok := strings.Cut(line, ")] exec ")
	if !ok {
		return "", nil, false
	}
	name, reason, ok := strings.Cut(rest, " failed: ")
	if !ok {
		return "", nil, false
	}
	switch reason {
	case "No such file or directory":
		return name, fs.ErrNotExist, true
	case "Permission denied":
		return name, fs.ErrPermission, true
	}
	return name, errors.New(reason), true
}

// envFor splits a command's environment between an env-file in the
// private directory dir (the values without a newline) and the client's
// own environment (those with one, passed as -e NAME), and returns the
// flags.
func envFor(env []string, dir string) (clientEnv, args []string, err error) {
	clientEnv = os.Environ()
	var lines []string
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		if strings.ContainsAny(v, "\n\r") {
			clientEnv = append(clientEnv, kv)
			args = append(args, "-e", k)
			continue
		}
		lines = append(lines, kv)
	}
	if len(lines) == 0 {
		return clientEnv, args, nil
	}
	file := filepath.Join(dir, "env")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return nil, nil, err
	}
	return clientEnv, append(args, "--env-file", file), nil
}

// workDir makes a private directory for a run's files: in the store's
// tmp/, named after this process as the store's own work directories are,
// so that pinfold clean removes it after a kill -9; else in $TMPDIR.
func workDir(store string) (string, error) {
	if store != "" {
		if err := os.MkdirAll(filepath.Join(store, "tmp"), 0o700); err == nil {
			dir := filepath.Join(store, "tmp", Owner()+"-"+randomID())
			if err := os.Mkdir(dir, 0o700); err == nil {
				return dir, nil
			}
		}
	}
	return os.MkdirTemp("", "pinfold-")
}

func randomID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Owner is this process's label value: its pid and start time, which
// tell a live pinfold from a reused pid.
func Owner() string {
	return fmt.Sprintf("%d-%d", os.Getpid(), startTime(os.Getpid()))
}

// startTime reads a process's start time, 0 when it is gone.
func startTime(pid int) uint64 { return procstat.StartTime(pid) }

// watch starts the clock of a started container's process: it is killed
// when timeout (if any) passes or ctx ends first.
func (p *Process) watch(ctx context.Context, timeout time.Duration) {
	p.start = time.Now()
	if timeout > 0 {
		p.timer = time.AfterFunc(timeout, func() {
			p.timedOut.Store(true)
			p.kill()
		})
	}
	go func() {
		select {
		case <-ctx.Done():
			p.kill()
		case <-p.done:
		}
	}()
}
