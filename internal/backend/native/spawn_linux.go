package native

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrUnsupported is returned on architectures without a built init.
var ErrUnsupported = errors.New("the native sandbox is not available on this architecture")

// Status is how a sandboxed command ended.
type Status struct {
	// Wait is the command's wait status; meaningful unless Killed.
	Wait syscall.WaitStatus
	// Killed is set when the init died before reporting (it was killed,
	// e.g. by a timeout or the OOM killer).
	Killed  bool
	TmpFull bool
	// Marks are the init's timeline (SpawnConfig.Trace): CLOCK_MONOTONIC
	// nanoseconds by step name.
	Marks []Mark
}

// Mark is one point of the init's timeline.
type Mark struct {
	Step string
	Mono int64
}

// markNames name the init's tmark ids (initc/init.c).
var markNames = [...]string{
	1: "init: spawn received", 2: "init: namespaces created", 3: "init: id maps written",
	4: "init: config received", 5: "init: cgroups and idmaps ready", 11: "init: ids switched",
	12: "init: released", 13: "init: root built", 14: "init: command received",
	15: "init: command executed", 16: "init: command exited", 17: "init: landlock ruleset made",
}

// Init is a started sandbox init.
type Init struct {
	cfg    *Config
	sock   int
	pid    int // stage 2: the sandbox's PID 1, a child of this process
	stage1 int
	// pending: the init has not yet been heard to report stage 2's pid
	// (see started); spawnErr is why it never will.
	// startMu serialises started, which Close may call from another
	// goroutine than the one building the sandbox.
	startMu  sync.Mutex
	pending  bool
	spawnErr error
	// cgself: the first stage moved itself into the sandbox's cgroups
	// (SpawnConfig.CgroupSelf), where it counts against --pids until
	// reaped: Exec reaps it first.
	cgself bool
	tun    *os.File // the sandbox's TUN device, until TUN takes it

	// sent are the spawn, config and exec messages, for launch records.
	sent [3][]byte
	// adopted is when SpawnFirst adopted the launcher's init
	// (CLOCK_MONOTONIC ns), 0 for an init spawned here.
	adopted int64
	// queued is the config the launcher queued after the spawn message
	// (a config hint), which the init acts on unasked: Configure sends
	// nothing when it is the one it would send, and refuses otherwise.
	queued []byte
	// hinted is when Configure found the queued config to be its own
	// (CLOCK_MONOTONIC ns), 0 otherwise.
	hinted int64

	mu     sync.Mutex
	reaped bool
	closed bool
}

var initExe struct {
	sync.Once
	path string
	err  error
}

// initPath returns an executable path for the embedded init: a sealed
// memfd, so no process in the sandbox can reach (let alone modify) a file
// of the host through /proc/*/exe.
func initPath() (string, error) {
	initExe.Do(func() {
		if len(initBinary) == 0 {
			initExe.err = ErrUnsupported
			return
		}
		fd, err := unix.MemfdCreate("pinfold-init", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_EXEC)
		if err == unix.EINVAL { // kernels before 6.3 do not know MFD_EXEC
			fd, err = unix.MemfdCreate("pinfold-init", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		}
		if err != nil {
			initExe.err = fmt.Errorf("creating the init memfd: %w", err)
			return
		}
		for b := initBinary; len(b) > 0; {
			n, err := unix.Write(fd, b)
			if err != nil {
				unix.Close(fd)
				initExe.err = fmt.Errorf("writing the init memfd: %w", err)
				return
			}
			b = b[n:]
		}
		seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
			unix.Close(fd)
			initExe.err = fmt.Errorf("sealing the init memfd: %w", err)
			return
		}
		initExe.path = "/proc/self/fd/" + strconv.Itoa(fd)
	})
	return initExe.path, initExe.err
}

// Start launches a sandbox init for c: Spawn, then Configure.
func Start(c *Config) (*Init, error) {
	in, err := Spawn(&c.SpawnConfig)
	if err != nil {
		return nil, err
	}
	if err := in.Configure(c); err != nil {
		in.Close()
		return nil, err
	}
	return in, nil
}

// Spawn executes the init and has it create the sandbox's namespaces,
// and returns as soon as the init runs: the caller prepares the rest of
// the config meanwhile (0.6 ms of a first run's critical path, the init's
// exec and namespaces, used to be waited for here). The sandbox's PID 1
// is known once the init reports it; every method but Configure waits
// for that first (started), and a failure to spawn is the error of the
// first that returns one (Ready, TUN or Exec). The init then waits for
// Configure.
func Spawn(s *SpawnConfig) (*Init, error) {
	msg, err := EncodeSpawn(s)
	if err != nil {
		return nil, err
	}
	exe, err := initPath()
	if err != nil {
		return nil, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("creating the init socket: %w", err)
	}
	// Queue the message before the init exists: it reads it first thing.
	if err := unix.Sendmsg(fds[0], msg, nil, nil, 0); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, fmt.Errorf("sending the spawn config: %w", err)
	}
	pid, err := syscall.ForkExec(exe, []string{"pinfold-init"}, &syscall.ProcAttr{
		Env:   []string{},
		Files: []uintptr{uintptr(fds[1])},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	unix.Close(fds[1])
	if err != nil {
		unix.Close(fds[0])
		return nil, fmt.Errorf("starting the sandbox init: %w", err)
	}
	in := &Init{sock: fds[0], stage1: pid, pending: true, cgself: len(s.CgroupSelf) > 0}
	in.sent[0] = msg
	return in, nil
}

// launcherInit is the init the launcher pre-spawned for this first run
// (launcherSpawned), until SpawnFirst adopts it or DiscardLauncherInit
// kills it.
var launcherInit struct {
	sync.Mutex
	in  *Init
	msg []byte // the M_SPAWN message it was sent
	cfg []byte // the M_CONFIG message queued after it, if any
}

// launcherGrace bounds how long an init the launcher pre-spawned may wait
// unclaimed (a prompt, another backend, a path that never asks for it).
const launcherGrace = time.Second

func init() {
	if launcherMaxprocs() {
		// The runtime's alone (launch.c: with_maxprocs): nothing this
		// process starts inherits it, and the environment is the one a
		// launch record's key was made from.
		os.Unsetenv("GOMAXPROCS")
	}
	sock, stage1, memfd, msg, cfg, ok := launcherSpawned()
	if !ok {
		return
	}
	launcherInit.in = &Init{sock: sock, stage1: stage1, pending: true}
	launcherInit.msg, launcherInit.cfg = msg, cfg
	// The main goroutine stays on the main thread, the init's parent
	// (see SpawnFirst): package inits run there, and a lock taken in
	// one holds for main.
	runtime.LockOSThread()
	if memfd > 0 {
		// The launcher's memfd holds the same init: the waiter and any
		// later instance are executed from it.
		initExe.Do(func() { initExe.path = "/proc/self/fd/" + strconv.Itoa(memfd) })
	}
	time.AfterFunc(launcherGrace, DiscardLauncherInit)
}

func takeLauncherInit() (*Init, []byte, []byte) {
	launcherInit.Lock()
	defer launcherInit.Unlock()
	in, msg, cfg := launcherInit.in, launcherInit.msg, launcherInit.cfg
	launcherInit.in, launcherInit.msg, launcherInit.cfg = nil, nil, nil
	return in, msg, cfg
}

// DiscardLauncherInit kills the init the launcher pre-spawned, if nobody
// adopted it, and reaps it in the background: a run on another backend
// must not wait for namespaces it does not use (an init stopped or slow
// to clone would hold it up).
func DiscardLauncherInit() {
	if in, _, _ := takeLauncherInit(); in != nil {
		in.discard()
	}
}

// Discard kills an init that was never configured, or whose queued
// config Configure refused (ErrConfigHint), and reaps it in the
// background.
func (in *Init) Discard() { in.discard() }

// ErrConfigHint is Configure's refusal of a config other than the one the
// launcher queued for the init it adopted (a config hint, see
// ConfigHintFile): that init acts on the queued one, so the caller
// discards it (Discard) and spawns another.
var ErrConfigHint = errors.New("the pre-spawned sandbox init was sent another config")

// discard kills an init that was never configured without waiting for
// its report: its first stage's process group, which the second stage
// inherits (init.c puts stage 1 in a group of its own before it clones),
// and the first stage itself (in case it had not made the group yet:
// then there is no second stage). Both are reaped in the background.
func (in *Init) discard() {
	in.mu.Lock()
	pg := in.stage1
	if !in.closed {
		in.closed = true
		unix.Close(in.sock)
	}
	in.reaped = true
	in.mu.Unlock()
	if pg <= 0 {
		return
	}
	unix.Kill(-pg, unix.SIGKILL)
	unix.Kill(pg, unix.SIGKILL)
	go func() {
		// Stage 1 by its pid (killed before it made its group, it is in
		// ours), then whatever is left of its group: stage 2.
		for {
			if _, err := unix.Wait4(pg, nil, unix.WALL, nil); err != unix.EINTR {
				break
			}
		}
		for {
			_, err := unix.Wait4(-pg, nil, unix.WALL, nil)
			if err != nil && err != unix.EINTR {
				return // ECHILD: both gone
			}
		}
	}()
}

// SpawnFirst is Spawn for a run's first instance: it adopts the init the
// launcher started before the Go runtime did (initc/launch.c: pre_spawn),
// which has made the namespaces meanwhile, when the message it was sent
// is byte for byte the one Spawn would send and the caller runs on the
// main thread; otherwise it kills that init and spawns as Spawn does.
func SpawnFirst(s *SpawnConfig) (*Init, error) {
	pre, sent, cfg := takeLauncherInit()
	if pre == nil {
		return Spawn(s)
	}
	msg, err := EncodeSpawn(s)
	// The init's stages are children of the thread that started them, the
	// launcher's, the process's main thread, and die with that thread
	// (their parent-death signal): a hand-off's exec from another thread
	// ends it. So the init is adopted on the main thread only, to which
	// the main goroutine is locked (see init; the runtime never ends the
	// main thread otherwise).
	if err == nil && bytes.Equal(msg, sent) && unix.Gettid() == unix.Getpid() {
		pre.sent[0] = msg
		pre.cgself = len(s.CgroupSelf) > 0
		pre.adopted = monotonic()
		pre.queued = cfg
		return pre, nil
	}
	// Killed, and reaped meanwhile: a hand-off's exec that comes first
	// leaves what is left to the waiter (initc/init.c: reap_others).
	pre.discard()
	return Spawn(s)
}

// Adopted returns when the init was adopted from the launcher
// (CLOCK_MONOTONIC ns), or 0.
func (in *Init) Adopted() int64 { return in.adopted }

// Hinted returns when Configure found that the launcher had queued the
// init's config already (a config hint's; CLOCK_MONOTONIC ns), or 0.
func (in *Init) Hinted() int64 { return in.hinted }

func monotonic() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// started waits for the init's first report, the pid of the sandbox's
// PID 1 (stage 2, a child of this process through CLONE_PARENT), unless
// it came already, and returns why the spawn failed, if it did. Close
// waits for it too: killed without its pid known, stage 2 would outlive
// its stage 1, waiting for a release that never comes.
func (in *Init) started() error {
	in.startMu.Lock()
	defer in.startMu.Unlock()
	if !in.pending {
		return in.spawnErr
	}
	in.pending = false
	typ, p, _, err := in.read()
	switch {
	case err != nil:
		in.spawnErr = fmt.Errorf("starting the sandbox init: %w", err)
	case typ == msgError:
		in.spawnErr = decodeError(p, nil)
	case typ != msgPID || len(p) < 4:
		in.spawnErr = fmt.Errorf("sandbox init: unexpected message %d", typ)
	default:
		in.mu.Lock()
		in.pid = int(int32(binary.NativeEndian.Uint32(p)))
		in.mu.Unlock()
	}
	return in.spawnErr
}

// Configure sends the rest of the config; it does not wait for the init
// to act on it (Ready, Exec and Wait report failures), nor for the spawn
// to be reported: the init reads it once the namespaces are made, and a
// spawn that failed is the error of the next call.
func (in *Init) Configure(c *Config) error {
	msg, err := EncodeConfig(c)
	if err != nil {
		return err
	}
	if q := in.queued; q != nil {
		in.queued = nil
		if !bytes.Equal(q, msg) {
			return ErrConfigHint
		}
		in.cfg = c
		in.sent[1] = msg
		in.hinted = monotonic()
		return nil // the init has it already
	}
	in.cfg = c
	in.sent[1] = msg
	if err := unix.Sendmsg(in.sock, msg, nil, nil, 0); err != nil {
		if err == unix.EPIPE || err == unix.ECONNRESET {
			return in.died()
		}
		return fmt.Errorf("sending the sandbox config: %w", err)
	}
	return nil
}

// Sent returns the spawn, config and exec messages this init was sent,
// which a LaunchRecord replays.
func (in *Init) Sent() (spawn, config, exec []byte) { return in.sent[0], in.sent[1], in.sent[2] }

// Pid returns the host pid of the sandbox's PID 1, 0 if it failed to start.
func (in *Init) Pid() int {
	in.started()
	return in.pid
}

// read receives one message; fd is a descriptor passed with it, or -1.
func (in *Init) read() (typ uint32, payload []byte, fd int, err error) {
	buf := make([]byte, 8192)
	oob := make([]byte, unix.CmsgSpace(4*4))
	fd = -1
	reset := false
	for {
		n, oobn, _, _, err := unix.Recvmsg(in.sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err == unix.ECONNRESET && !reset {
			// An init that exited with our config unread resets the
			// socket, and the kernel reports that once before the
			// messages it sent first (its error report among them).
			reset = true
			continue
		}
		if err != nil {
			return 0, nil, -1, err
		}
		if n == 0 {
			return 0, nil, -1, io.EOF
		}
		if oobn > 0 {
			if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
				for _, m := range msgs {
					if fds, err := unix.ParseUnixRights(&m); err == nil {
						for _, f := range fds {
							if fd < 0 {
								fd = f
							} else {
								unix.Close(f)
							}
						}
					}
				}
			}
		}
		if n < 8 {
			return 0, nil, fd, fmt.Errorf("short message from the sandbox init")
		}
		return binary.NativeEndian.Uint32(buf), buf[8:n], fd, nil
	}
}

// TUN returns the TUN device the init made for SpawnConfig.TUN; the caller
// owns it. It waits for the init to send it if it has not yet.
func (in *Init) TUN() (*os.File, error) {
	if err := in.started(); err != nil {
		return nil, err
	}
	for in.tun == nil {
		typ, p, fd, err := in.read()
		switch {
		case err == io.EOF:
			return nil, in.died()
		case err != nil:
			return nil, err
		case typ == msgTUN && fd >= 0:
			in.tun = os.NewFile(uintptr(fd), "/dev/net/tun")
		case typ == msgError:
			return nil, decodeError(p, in.cfg)
		default:
			if fd >= 0 {
				unix.Close(fd)
			}
			return nil, fmt.Errorf("sandbox init: unexpected message %d before the network device", typ)
		}
	}
	t := in.tun
	in.tun = nil
	return t, nil
}

// Ready waits until the init has built the root.
func (in *Init) Ready() error {
	if err := in.started(); err != nil {
		return err
	}
	typ, p, fd, err := in.read()
	if typ == msgTUN && fd >= 0 && err == nil {
		in.tun = os.NewFile(uintptr(fd), "/dev/net/tun")
		typ, p, fd, err = in.read()
	}
	if typ == msgReady && err == nil {
		in.reapStage1()
	}
	if fd >= 0 {
		unix.Close(fd)
	}
	switch {
	case err == io.EOF:
		return in.died()
	case err != nil:
		return err
	case typ == msgError:
		return decodeError(p, in.cfg)
	case typ != msgReady:
		return fmt.Errorf("sandbox init: unexpected message %d", typ)
	}
	return nil
}

// Exec starts the command: SendExec, then AwaitStarted. With x.TTY it
// returns the master side of the terminal the command runs on.
func (in *Init) Exec(x *Exec) (pty *os.File, err error) {
	if err := in.SendExec(x); err != nil {
		return nil, err
	}
	return in.AwaitStarted()
}

// SendExec sends the command; AwaitStarted waits until it runs. What the
// caller does in between overlaps the init's fork and exec of it.
func (in *Init) SendExec(x *Exec) error {
	if err := in.started(); err != nil {
		return err
	}
	if in.cgself {
		in.mu.Lock()
		unreaped := in.stage1 > 0
		in.mu.Unlock()
		if unreaped {
			if err := in.Ready(); err != nil {
				return err
			}
		}
	}
	msg, err := EncodeExec(x)
	if err != nil {
		return err
	}
	in.sent[2] = msg
	var oob []byte
	if x.TTY == nil && len(x.Stdio) == 3 {
		oob = unix.UnixRights(x.Stdio...)
	}
	if err := unix.Sendmsg(in.sock, msg, oob, nil, 0); err != nil {
		if err == unix.EPIPE || err == unix.ECONNRESET {
			return in.died()
		}
		return fmt.Errorf("sending the command: %w", err)
	}
	return nil
}

// AwaitStarted waits until the command SendExec sent runs, and returns
// its terminal's master side for a command on one.
func (in *Init) AwaitStarted() (pty *os.File, err error) {
	for {
		typ, p, fd, err := in.read()
		switch {
		case err == io.EOF:
			return nil, in.died()
		case err != nil:
			return nil, err
		case typ == msgReady:
			in.reapStage1()
		case typ == msgPTY && fd >= 0:
			pty = os.NewFile(uintptr(fd), "/dev/ptmx")
		case typ == msgTUN && fd >= 0:
			in.tun = os.NewFile(uintptr(fd), "/dev/net/tun")
		case typ == msgStarted:
			return pty, nil
		case typ == msgError:
			if pty != nil {
				pty.Close()
			}
			return nil, decodeError(p, in.cfg)
		default:
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}
}

// Wait blocks until the command has exited and everything it started is
// gone (the init kills the rest before reporting), or the init died.
func (in *Init) Wait() (Status, error) {
	if err := in.started(); err != nil {
		return Status{}, err
	}
	for {
		typ, p, fd, err := in.read()
		if fd >= 0 {
			unix.Close(fd)
		}
		switch {
		case err == io.EOF:
			return Status{Killed: true}, nil
		case err != nil:
			return Status{}, err
		case typ == msgExit && len(p) >= 8:
			st := Status{
				Wait:    syscall.WaitStatus(binary.NativeEndian.Uint32(p)),
				TmpFull: binary.NativeEndian.Uint32(p[4:])&exitTmpFull != 0,
			}
			for m := p[8:]; len(m) >= 16; m = m[16:] {
				id := binary.NativeEndian.Uint64(m)
				if id < uint64(len(markNames)) {
					st.Marks = append(st.Marks, Mark{markNames[id], int64(binary.NativeEndian.Uint64(m[8:]))})
				}
			}
			return st, nil
		case typ == msgError:
			return Status{}, decodeError(p, in.cfg)
		}
	}
}

// Signal sends sig to the init, which forwards it to the command's process
// group.
func (in *Init) Signal(sig syscall.Signal) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.reaped || in.pid == 0 {
		return os.ErrProcessDone
	}
	return unix.Kill(in.pid, sig)
}

// Kill kills the init and with it everything in the sandbox.
func (in *Init) Kill() error { return in.Signal(syscall.SIGKILL) }

// died explains an init that closed its socket without a report.
func (in *Init) died() error {
	// Stage 2's pid, if it was sent before; or why the spawn failed,
	// which a Configure that found the socket closed reports.
	serr := in.started()
	in.Reap()
	if serr != nil && !errors.Is(serr, io.EOF) {
		return serr
	}
	return errors.New("the sandbox init exited unexpectedly")
}

// reapStage1 reaps the init's first stage once the root is built
// (msgReady): it exits as soon as it has released the sandbox's PID 1,
// which builds the root only then, so this waits a moment at most. Left
// to Reap, it would be a zombie for the sandbox's life, under this
// process or the waiter that replaces it.
func (in *Init) reapStage1() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.reaped || in.stage1 <= 0 {
		return
	}
	for {
		_, err := unix.Wait4(in.stage1, nil, unix.WALL, nil)
		if err != unix.EINTR {
			break
		}
	}
	in.stage1 = 0
}

// Reap waits until the init processes are gone. After Reap the sandbox's
// namespaces are torn down and its cgroups are empty.
func (in *Init) Reap() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.reaped {
		return
	}
	in.reaped = true
	for _, pid := range []int{in.stage1, in.pid} {
		if pid > 0 {
			for {
				_, err := unix.Wait4(pid, nil, unix.WALL, nil)
				if err != unix.EINTR {
					break
				}
			}
		}
	}
}

// Close kills the sandbox if it is still running, reaps it and releases
// the socket. Closing the socket first also ends a stage 1 still waiting
// for its config.
func (in *Init) Close() error {
	in.started()
	in.mu.Lock()
	var err error
	if !in.closed {
		in.closed = true
		err = unix.Close(in.sock)
		if in.tun != nil {
			in.tun.Close()
		}
	}
	if !in.reaped {
		for _, pid := range []int{in.pid, in.stage1} {
			if pid > 0 {
				unix.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	in.mu.Unlock()
	in.Reap()
	return err
}

// Handoff replaces this process with a small waiter that waits for the
// command, forwards SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2 and SIGTERM
// to it, kills the sandbox at deadline (CLOCK_MONOTONIC ns, 0 for none),
// prints timeoutMsg or tmpFullMsg on stderr when those happen, and exits
// with the command's status (128+N for signal N, 124 after the deadline).
// It returns only if the exec fails.
//
// netFD, when not -1, is the network helper's control socket, handed off
// (netpolicy.Stack.Handoff): the waiter shuts it once the command ended
// and waits for the helper's last word (its summary printed).
//
// finish, when given, is a run's changeset to finish afterwards: the
// pinfold binary, the store and the changeset's id, whose lock the caller
// passes on (see the waiter in initc/init.c). The waiter removes an empty
// one itself and otherwise execs "pinfold __finish STORE ID STATUS" with
// this process's environment.
//
// limits, when set, are the cgroups the sandbox runs in: the waiter reports
// the limits hit and removes them (see WaitLimits).
//
// It must be called from the OS thread that spawned the init (use
// runtime.LockOSThread): exec ends every other thread, and the death of
// the thread that started the sandbox would kill it.
//
// waiterSignals are the signals the waiter forwards to the command (fwd
// in initc/init.c's waiter_main).
var waiterSignals = [...]syscall.Signal{unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2, unix.SIGTERM}

// WaitLimits are the cgroups a waiter takes over: once the command ended
// and the sandbox is gone, it prints OOMMsg (the command was killed) or
// MemoryMsg (it exited) when MemoryEvents counts an oom_kill, PidsMsg when
// PidsEvents counts a refused fork (max), and removes Dirs.
// HitFile, when set, is where the waiter writes the limits hit (see
// sandbox.HandoffOptions.LimitsHitFile).
type WaitLimits struct {
	MemoryEvents, OOMMsg, MemoryMsg string
	PidsEvents, PidsMsg             string
	Dirs                            []string
	HitFile                         string
}

// args are the waiter's options for l (initc/init.c's waiter_main).
func (l *WaitLimits) args() []string {
	var a []string
	if l.MemoryEvents != "" {
		a = append(a, "-m", l.MemoryEvents, l.OOMMsg, l.MemoryMsg)
	}
	if l.PidsEvents != "" {
		a = append(a, "-p", l.PidsEvents, l.PidsMsg)
	}
	for _, d := range l.Dirs {
		a = append(a, "-g", d)
	}
	if l.HitFile != "" {
		a = append(a, "-l", l.HitFile)
	}
	return a
}

func (in *Init) Handoff(deadline int64, timeoutMsg, tmpFullMsg string, netFD int, limits *WaitLimits, finish ...string) error {
	exe, err := initPath()
	if err != nil {
		return err
	}
	if len(finish) != 0 && len(finish) != 3 {
		return errors.New("handing off: finish needs the binary, the store and the changeset's id")
	}
	if err := in.started(); err != nil {
		return err
	}
	if _, err := unix.FcntlInt(uintptr(in.sock), unix.F_SETFD, 0); err != nil {
		return fmt.Errorf("handing off: %w", err)
	}
	argv := []string{"pinfold-wait", strconv.Itoa(in.sock), strconv.Itoa(in.pid),
		strconv.FormatInt(deadline, 10), timeoutMsg, tmpFullMsg}
	if netFD >= 0 {
		argv = append(argv, "-n", strconv.Itoa(netFD))
	}
	if limits != nil {
		if len(limits.Dirs) > 8 {
			return errors.New("handing off: more cgroups than the waiter takes")
		}
		argv = append(argv, limits.args()...)
	}
	argv = append(argv, finish...)
	env := []string{}
	if len(finish) > 0 {
		env = os.Environ()
	}
	// The signals the waiter forwards stay blocked across the exec: one
	// that came after it but before the waiter's signalfd would else
	// kill the waiter with their default action, and not reach the
	// command. Blocked, it waits for the signalfd.
	var set, old unix.Sigset_t
	for _, sig := range waiterSignals {
		set.Val[(sig-1)/64] |= 1 << ((uint(sig) - 1) % 64)
	}
	unix.PthreadSigmask(unix.SIG_BLOCK, &set, &old)
	err = syscall.Exec(exe, argv, env)
	unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
	unix.FcntlInt(uintptr(in.sock), unix.F_SETFD, unix.FD_CLOEXEC)
	return fmt.Errorf("handing off to the waiter: %w", err)
}
