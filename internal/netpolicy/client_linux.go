package netpolicy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/internal/helper"
)

// Stack is a sandbox's network, served by the helper process.
type Stack struct {
	cfg   Config
	cmd   *exec.Cmd
	ctl   *os.File
	done  chan struct{} // the reader has stopped
	bye   chan struct{} // the helper said its last
	ready chan struct{} // the helper answered the device (startErr says how)
	// sock and config: the shared helper's socket and the configuration
	// message sent on it (for launch records); "" with a helper of its own.
	sock   string
	config []byte

	mu       sync.Mutex
	startErr error
	viol     []Violation
	vindex   map[string]int
	logMu    sync.Mutex
	logged   int // violations written to cfg.Log
	closed   bool
}

// ErrNoHelper is wrapped by Start's error when the helper is missing.
var ErrNoHelper = errors.New("pinfold's network helper " + HelperName + " is missing")

// ErrHelper is wrapped by the errors of a helper that would not start or
// serve.
var ErrHelper = errors.New("pinfold's network helper failed")

// HelperPath finds the helper: $PINFOLD_NET_HELPER, else pinfold-net next
// to the running binary, else on PATH.
func HelperPath() (string, error) {
	if p, err := helper.Find(HelperName, "PINFOLD_NET_HELPER"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w: the network modes outbound and allow, and published ports, need it next to the pinfold binary (scripts/build.sh builds both; or set PINFOLD_NET_HELPER)", ErrNoHelper)
}

// Start serves the sandbox whose TUN device is tun (Start owns it) with
// pinfold's network stack, in a helper process, until Close. It returns
// once the helper is ready (its published ports listen).
func Start(ctx context.Context, cfg Config, tun *os.File) (*Stack, error) {
	s, err := Launch(cfg, "")
	if err != nil {
		tun.Close()
		return nil, err
	}
	if err := s.Attach(tun); err != nil {
		return nil, err
	}
	if err := s.Ready(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Launch starts the helper for cfg before the sandbox's TUN device
// exists, so that its start overlaps the sandbox's; Attach hands it the
// device. With a store directory, the shared helper there serves it when
// one runs (see helper.go).
func Launch(cfg Config, store string) (*Stack, error) {
	path, err := HelperPath()
	if err != nil {
		return nil, err
	}
	if s := launchShared(cfg, path, store); s != nil {
		return s, nil
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	ctl, child := os.NewFile(uintptr(fds[0]), "ctl"), os.NewFile(uintptr(fds[1]), "ctl")
	cmd := &exec.Cmd{Path: path, Args: []string{HelperName}, Env: []string{},
		ExtraFiles: []*os.File{child},
		// Its own process group: the terminal's Ctrl-C is the command's,
		// not the network's. It dies with the supervisor, by the signal
		// and, surely, when its end of ctl reads end of file.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}}
	if err := cmd.Start(); err != nil {
		ctl.Close()
		child.Close()
		return nil, fmt.Errorf("%w: starting %s: %w", ErrHelper, path, err)
	}
	child.Close()
	s := &Stack{cfg: cfg, cmd: cmd, ctl: ctl, done: make(chan struct{}), bye: make(chan struct{}), ready: make(chan struct{}), vindex: map[string]int{}}
	go s.read()
	if _, err := ctl.Write((&Message{Config: cfg.Wire()}).Marshal()); err != nil {
		s.Close()
		return nil, fmt.Errorf("%w: configuring it: %w", ErrHelper, err)
	}
	return s, nil
}

// Attach hands the helper the sandbox's TUN device (Attach owns it).
// It does not wait for the helper to serve it: until then the kernel
// queues what the sandbox sends. Ready waits.
func (s *Stack) Attach(tun *os.File) error {
	err := unix.Sendmsg(int(s.ctl.Fd()), (&Message{TUN: true}).Marshal(), unix.UnixRights(int(tun.Fd())), nil, 0)
	tun.Close()
	if err != nil {
		s.Close()
		return fmt.Errorf("%w: handing over the device: %w", ErrHelper, err)
	}
	return nil
}

// Ready waits until the helper serves the device (and its published ports
// listen).
func (s *Stack) Ready(ctx context.Context) error {
	var err error
	select {
	case <-s.ready:
		err = s.Err()
	case <-ctx.Done():
		err = ctx.Err()
	case <-time.After(10 * time.Second):
		err = errors.New("the network helper did not start within 10 s")
	}
	if err != nil {
		s.Close()
		return fmt.Errorf("%w: %w", ErrHelper, err)
	}
	return nil
}

// Err reports why the helper could not serve the device, once it said so
// (nil while it starts or serves).
func (s *Stack) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startErr
}

// read handles the helper's messages until it goes.
func (s *Stack) read() {
	defer close(s.done)
	buf := make([]byte, 64<<10)
	answered := false
	answer := func(err error) {
		if !answered {
			answered = true
			s.mu.Lock()
			s.startErr = err
			s.mu.Unlock()
			close(s.ready)
		}
	}
	defer answer(errors.New("the network helper exited"))
	for {
		n, err := s.ctl.Read(buf)
		if err != nil || n == 0 {
			return
		}
		var m Message
		if json.Unmarshal(buf[:n], &m) != nil {
			continue
		}
		switch {
		case m.Ready:
			answer(nil)
		case m.Error != "":
			answer(m.Err())
		case m.Violation != nil:
			s.record(*m.Violation)
		case m.Bye:
			close(s.bye)
			return
		}
	}
}

// record keeps a violation the helper reported (it counts repeats).
func (s *Stack) record(v Violation) {
	key := v.Kind + "\x00" + v.Name + "\x00" + v.Addr
	s.mu.Lock()
	if i, ok := s.vindex[key]; ok {
		s.viol[i] = v
	} else if len(s.viol) < maxViolations {
		s.vindex[key] = len(s.viol)
		s.viol = append(s.viol, v)
	}
	s.mu.Unlock()
	// Counted with the write, under logMu: a handoff (Handoff) tells the
	// helper how many it need not log again.
	s.logMu.Lock()
	s.mu.Lock()
	w := s.cfg.Log
	if w != nil {
		s.logged++
	}
	s.mu.Unlock()
	if w != nil {
		b, _ := json.Marshal(v)
		w.Write(append(b, '\n'))
	}
	s.logMu.Unlock()
}

// Violations returns what was blocked so far, first occurrence first.
func (s *Stack) Violations() []Violation {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Violation(nil), s.viol...)
}

// Close stops the helper. The violations it reported stay readable. It
// does not wait for the helper to exit: the helper drops its copy of the
// sandbox's TUN device as it goes, which takes milliseconds.
//
// It waits for the helper's last word, which follows every violation,
// for up to 10 s: the helper first lets its guards finish (up to 1.5 s,
// netstack's Drain), and on a loaded machine a wait of 1 s could give up
// before the violations came, which the run then did not report. Only a
// helper that hangs makes the wait that long.
func (s *Stack) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	// The helper has sent every violation it saw once it answers the
	// shutdown with its last message.
	unix.Shutdown(int(s.ctl.Fd()), unix.SHUT_WR)
	select {
	case <-s.bye:
	case <-s.done:
	case <-time.After(10 * time.Second):
	}
	s.ctl.Close()
	if s.cmd != nil {
		go func() {
			timer := time.AfterFunc(5*time.Second, func() { s.cmd.Process.Kill() })
			s.cmd.Wait()
			timer.Stop()
		}()
	}
	return nil
}

// Shared returns the shared helper's socket and the configuration message
// the stack sent it, for a launch record (see initc/launch.c, which
// connects and sends the same); ok is false for a helper of its own.
func (s *Stack) Shared() (sock string, config []byte, ok bool) {
	return s.sock, s.config, s.sock != ""
}

// Handoff prepares the stack to outlive this process's exec into the
// waiter: the helper is told to log the violations to logPath itself (""
// for no log) and to print their summary on report at the end (Report),
// and the control socket is kept across exec. It returns the socket's
// descriptor, which the waiter shuts when the command ended and then
// reads until the helper's last word.
func (s *Stack) Handoff(report *os.File, logPath string) (int, error) {
	if s.cmd != nil {
		// A helper of its own is this process's child, which the
		// parent-death signal would kill with the exec'ing thread.
		return -1, errors.New("handing off: the network helper is not shared")
	}
	// From here the helper writes the log: what this process logged so
	// far it skips.
	s.logMu.Lock()
	s.mu.Lock()
	s.cfg.Log = nil
	logged := s.logged
	s.mu.Unlock()
	s.logMu.Unlock()
	b := (&Message{Report: &Report{Log: logPath, Logged: logged}}).Marshal()
	if err := unix.Sendmsg(int(s.ctl.Fd()), b, unix.UnixRights(int(report.Fd())), nil, 0); err != nil {
		return -1, fmt.Errorf("%w: handing off: %w", ErrHelper, err)
	}
	fd := int(s.ctl.Fd())
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
		return -1, fmt.Errorf("%w: handing off: %w", ErrHelper, err)
	}
	return fd, nil
}

// sharedSocket names the shared helper's socket for the helper binary at
// path in store: a rebuilt helper gets a socket of its own. "" when the
// path would be too long for a socket address.
func sharedSocket(path, store string) string {
	var st unix.Stat_t
	if store == "" || unix.Stat(path, &st) != nil {
		return ""
	}
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s %d %d %d %d", path, st.Dev, st.Ino, st.Size, st.Mtim.Nano())))
	sock := filepath.Join(store, "net-"+hex.EncodeToString(sum[:8])+".sock")
	if len(sock) >= 108 {
		return ""
	}
	return sock
}

// launchShared connects to the shared helper, or starts one for the runs
// that follow and returns nil.
func launchShared(cfg Config, path, store string) *Stack {
	if os.Getenv("PINFOLD_NET_SHARED") == "0" {
		return nil
	}
	sock := sharedSocket(path, store)
	if sock == "" {
		return nil
	}
	// Non-blocking: a helper that stopped accepting (its queue full) must
	// not hang the run, which then serves itself.
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: sock}); err != nil {
		unix.Close(fd)
		if err != unix.EAGAIN {
			startShared(path, sock)
		}
		return nil
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil
	}
	// The greeting says the helper took the connection (one about to
	// exit for idleness closes it instead). It comes at once from a
	// helper that is well; the bound is for a wedged one, and is loose
	// enough that a loaded machine's slow greeting is still taken (a
	// run that gives up serves itself and cannot hand off).
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	buf := make([]byte, 256)
	if n, err := unix.Poll(pfd, 3000); err != nil || n != 1 {
		unix.Close(fd)
		return nil
	}
	n, err := unix.Read(fd, buf)
	var m Message
	if err != nil || n <= 0 || json.Unmarshal(buf[:n], &m) != nil || !m.Hello {
		unix.Close(fd)
		return nil
	}
	ctl := os.NewFile(uintptr(fd), "ctl")
	s := &Stack{cfg: cfg, ctl: ctl, done: make(chan struct{}), bye: make(chan struct{}), ready: make(chan struct{}), vindex: map[string]int{},
		sock: sock, config: (&Message{Config: cfg.Wire()}).Marshal()}
	go s.read()
	if _, err := ctl.Write(s.config); err != nil {
		s.Close()
		return nil
	}
	return s
}

// startShared starts a shared helper on sock, in the background, in a
// session of its own: it outlives this process and exits when idle.
func startShared(path, sock string) {
	os.MkdirAll(filepath.Dir(sock), 0o700)
	// In "/": it must not keep the caller's directory busy.
	cmd := &exec.Cmd{Path: path, Args: []string{HelperName, "serve", sock}, Env: []string{}, Dir: "/",
		SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	if cmd.Start() == nil {
		// Reaped when it exits, if this process is still there.
		go cmd.Wait()
	}
}
