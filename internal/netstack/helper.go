package netstack

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/internal/netpolicy"
)

// Main is the pinfold-net helper. Run by pinfold for one sandbox, it
// gets the control socket as fd 3; run as "pinfold-net serve SOCKET" it
// is a shared helper that serves every sandbox whose supervisor connects
// to SOCKET, each on its own connection, and exits once none has been
// connected for IdleExit. The protocol on a control socket is in
// netpolicy's helper.go. It returns the exit status.
func Main() int {
	if len(os.Args) == 3 && os.Args[1] == "serve" {
		return daemon(os.Args[2])
	}
	// Every descriptor of the helper is non-blocking and waits in the
	// runtime's poller: a thread blocked in a read per sandbox would keep
	// the runtime retaking and handing off Ps at 20 µs intervals.
	if err := unix.SetNonblock(3, true); err != nil {
		fmt.Fprintln(os.Stderr, "pinfold-net: the control socket:", err)
		return 2
	}
	return serveConn(os.NewFile(3, "ctl"))
}

// recvmsg reads one message and the descriptors it carries from c,
// waiting in the poller.
func recvmsg(c syscall.RawConn, buf, oob []byte) (n, oobn int, err error) {
	rerr := c.Read(func(fd uintptr) bool {
		n, oobn, _, _, err = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
		return err != unix.EAGAIN
	})
	if rerr != nil {
		err = rerr
	}
	return n, oobn, err
}

// maxConfig bounds the configuration message (a larger one is
// malformed); maxMessage bounds the messages after it, whose largest is a
// report naming its log file (a path up to PATH_MAX).
const (
	maxConfig  = 256 << 10
	maxMessage = 8 << 10
)

// peekSize waits for the next message on c and returns its size, leaving
// it queued (MSG_PEEK|MSG_TRUNC: a sequenced-packet socket says the whole
// length).
func peekSize(c syscall.RawConn) (n int, err error) {
	rerr := c.Read(func(fd uintptr) bool {
		n, _, _, _, err = unix.Recvmsg(int(fd), nil, nil, unix.MSG_PEEK|unix.MSG_TRUNC)
		return err != unix.EAGAIN
	})
	if rerr != nil {
		err = rerr
	}
	return n, err
}

// maxSent bounds the violations a connection keeps until its handoff.
const maxSent = 10000

// logViolation appends v to the run's log as a JSON line.
func logViolation(l *netpolicy.RunLog, v netpolicy.Violation) {
	b, _ := json.Marshal(v)
	l.Write(append(b, '\n'))
}

// IdleExit is how long a shared helper stays without a sandbox.
const IdleExit = 30 * time.Second

// ReleaseAfter is how long a shared helper waits without a sandbox before
// it gives its memory back (see daemon), its binary's pages too: the
// next sandbox's helper reads them from disk again, a few milliseconds
// that the sandboxes of a burst (a build's commands, a test suite) should
// not pay one after the other.
const ReleaseAfter = 5 * time.Second

// serveConn serves one sandbox on its control socket, which it closes,
// with everything it made for it, when the supervisor goes.
func serveConn(ctl *os.File) int {
	defer ctl.Close()
	rc, err := ctl.SyscallConn()
	if err != nil {
		return 2
	}
	var wmu sync.Mutex
	send := func(m *netpolicy.Message) {
		wmu.Lock()
		ctl.Write(m.Marshal())
		wmu.Unlock()
	}
	// The configuration (allow lists, published ports) may be large: its
	// buffer is the message's size, peeked, and lives only while it is
	// read; what follows (the device, a report's log path) is small. A
	// buffer of the largest size for every connection's life cost each
	// sandbox up to its 256 KiB, once the heap reused its pages.
	size, err := peekSize(rc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pinfold-net: reading the configuration:", err)
		return 2
	}
	buf := make([]byte, min(max(size, 1), maxConfig))
	n, err := ctl.Read(buf)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pinfold-net: reading the configuration:", err)
		return 2
	}
	var m netpolicy.Message
	if err := json.Unmarshal(buf[:n], &m); err != nil || m.Config == nil {
		send(&netpolicy.Message{Error: "a malformed configuration"})
		return 2
	}
	cfg, err := m.Config.Config()
	if err != nil {
		send(&netpolicy.Message{Error: err.Error()})
		return 2
	}
	// The stack is built while the sandbox is: the device follows, in a
	// message of its own.
	pol := netpolicy.NewPolicy(cfg)
	// Until a handoff the violations go to the supervisor, which logs
	// them, and are kept in the order sent; after it nobody reads them
	// (a full socket would stall the stack): the helper logs them itself,
	// from the first the supervisor did not.
	var vmu sync.Mutex
	var sent []netpolicy.Violation
	var runLog *netpolicy.RunLog
	handedOff := false
	pol.OnViolation = func(v netpolicy.Violation) {
		vmu.Lock()
		defer vmu.Unlock()
		if handedOff {
			if runLog != nil {
				logViolation(runLog, v)
			}
			return
		}
		if len(sent) < maxSent {
			sent = append(sent, v)
		}
		send(&netpolicy.Message{Violation: &v})
	}
	srv := New(pol)
	buf = make([]byte, maxMessage)
	tunFD := -1
	defer func() {
		// The stack first: until it has stopped, it reads the device,
		// and a descriptor closed under it could be reused by the next
		// sandbox's device in this process.
		srv.Close()
		if tunFD >= 0 {
			closeDevice(tunFD)
		}
	}()
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, err := recvmsg(rc, buf, oob)
	if err != nil || n == 0 {
		return 2 // the supervisor went away
	}
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(msgs) == 1 {
		if fds, err := unix.ParseUnixRights(&msgs[0]); err == nil && len(fds) == 1 {
			tunFD = fds[0]
		}
	}
	if tunFD < 0 {
		send(&netpolicy.Message{Error: "no network device received"})
		return 2
	}
	if err := srv.AttachOnTraffic(tunFD); err != nil {
		send(netpolicy.ErrorMessage(err))
		return 1
	}
	send(&netpolicy.Message{Ready: true})
	var report *os.File // the handed-off run's stderr
	logged := 0         // violations the supervisor logged before it
	for {
		n, oobn, err := recvmsg(rc, buf, oob)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			break
		}
		var fds []int
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, cm := range msgs {
				if f, err := unix.ParseUnixRights(&cm); err == nil {
					fds = append(fds, f...)
				}
			}
		}
		var m netpolicy.Message
		if json.Unmarshal(buf[:n], &m) == nil && m.Report != nil && len(fds) == 1 && report == nil {
			var l *netpolicy.RunLog
			if m.Report.Log != "" {
				if l, err = netpolicy.OpenRunLog(m.Report.Log); err != nil {
					unix.Close(fds[0])
					continue
				}
			}
			report = os.NewFile(uintptr(fds[0]), "report")
			logged = m.Report.Logged
			vmu.Lock()
			handedOff, runLog = true, l
			if l != nil {
				for _, v := range sent[min(max(m.Report.Logged, 0), len(sent)):] {
					logViolation(l, v)
				}
			}
			sent = nil
			vmu.Unlock()
			continue
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	// The supervisor's run is over: what the sandbox sent before it
	// ended is checked, and every violation sent, before the last word.
	// At most 1.5 s, under the 2 s a handed-off run's waiter waits for
	// the last word (500 ms was short of what a loaded machine takes).
	srv.Drain(1500 * time.Millisecond)
	if report != nil {
		vmu.Lock()
		runLog.Close()
		written := runLog.Written()
		if written == "" && logged > 0 {
			// The supervisor wrote all of them, before the handoff.
			written = runLog.Path()
		}
		runLog = nil
		vmu.Unlock()
		netpolicy.Summarize(report, pol.Violations(), written)
		report.Close()
	}
	send(&netpolicy.Message{Bye: true})
	return 0
}

// The last close of a sandbox's TUN device removes it from the kernel
// there and then: milliseconds in a blocking call, waiting for RCU. While
// any goroutine sits in such a call, the runtime's monitor wakes every
// 20 µs to retake its P, and at a few hundred runs a second it never
// backs off: a fifth of the shared helper's CPU went there. So the
// devices are closed in batches, one burst every closeBatch, and the
// monitor sleeps in between.
const closeBatch = 50 * time.Millisecond

var closing struct {
	mu      sync.Mutex
	fds     []int
	pending bool
}

// closeDevice closes fd within closeBatch.
func closeDevice(fd int) {
	closing.mu.Lock()
	defer closing.mu.Unlock()
	closing.fds = append(closing.fds, fd)
	if closing.pending {
		return
	}
	closing.pending = true
	time.AfterFunc(closeBatch, func() {
		closing.mu.Lock()
		fds := closing.fds
		closing.fds, closing.pending = nil, false
		closing.mu.Unlock()
		for _, fd := range fds {
			unix.Close(fd)
		}
	})
}

// daemon is the shared helper: it listens on sock (in pinfold's store,
// which only its user may enter), serves each connection of its own user,
// and exits after IdleExit without one.
func daemon(sock string) int {
	exitAt := time.Now().Add(IdleExit)
	lfd, resumedAt, fresh := resumed()
	if fresh {
		exitAt = resumedAt
	} else {
		var err error
		if lfd, err = listen(sock); err != nil {
			if errors.Is(err, errRunning) {
				return 0
			}
			fmt.Fprintln(os.Stderr, "pinfold-net:", err)
			return 1
		}
	}
	lf := os.NewFile(uintptr(lfd), "listener")
	lrc, err := lf.SyscallConn()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pinfold-net:", err)
		return 1
	}
	var mu sync.Mutex
	active := 0
	var idle *time.Timer
	exitIfIdle := func() {
		mu.Lock()
		defer mu.Unlock()
		if active == 0 {
			// Stop taking connections first: one accepted but not yet
			// counted gets no greeting, and its supervisor starts a
			// helper of its own.
			lf.Close()
			unix.Unlink(sock)
			os.Exit(0)
		}
	}
	idle = time.AfterFunc(time.Until(exitAt), exitIfIdle)
	// The trimming loop runs while sandboxes come; once none has been
	// connected for ReleaseAfter, it stops, so that an idle helper runs
	// no code at all, and the helper starts afresh (reexec) and gives
	// back its binary's pages (releaseBinary).
	var stopTrim chan struct{}
	startTrim := func() {
		if stopTrim == nil {
			stopTrim = make(chan struct{})
			go trimWhenQuiet(stopTrim)
		}
	}
	// Armed from the start: the run that started the helper serves
	// itself, and perhaps none follows. It wakes the accept loop, which
	// alone may replace the process: no connection is then accepted
	// and not yet counted.
	release := time.AfterFunc(ReleaseAfter, func() {
		mu.Lock()
		defer mu.Unlock()
		if active == 0 && stopTrim != nil {
			close(stopTrim)
			stopTrim = nil
			lf.SetReadDeadline(time.Now())
		}
	})
	if fresh {
		// The new image served nothing: no heap to give back, and the
		// binary's pages its start touched go (a run already waiting in
		// the queue is greeted next, and the binary read back for it).
		release.Stop()
		mu.Lock()
		releaseBinary()
		rehearse()
		mu.Unlock()
	} else {
		startTrim()
	}
	// releaseNow starts afresh, or failing that gives back what this
	// process can: its heap, its idle threads and its binary's pages.
	releaseNow := func() {
		mu.Lock()
		defer mu.Unlock()
		if active > 0 || stopTrim != nil {
			return // a sandbox came since the release was due
		}
		err := reexec(lfd, exitAt)
		fmt.Fprintln(os.Stderr, "pinfold-net:", err)
		trim()
		releaseBinary()
		rehearse()
	}
	uid := os.Getuid()
	for {
		var nfd int
		if rerr := lrc.Read(func(fd uintptr) bool {
			nfd, _, err = unix.Accept4(int(fd), unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
			return err != unix.EAGAIN
		}); rerr != nil {
			err = rerr
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				lf.SetReadDeadline(time.Time{})
				releaseNow()
				continue
			}
			if err == unix.EINTR || err == unix.ECONNABORTED {
				continue
			}
			if err == unix.EMFILE || err == unix.ENFILE || err == unix.ENOBUFS || err == unix.ENOMEM {
				// Out of descriptors or memory for now: the runs
				// waiting in the queue get served once some end.
				time.Sleep(10 * time.Millisecond)
				continue
			}
			fmt.Fprintln(os.Stderr, "pinfold-net: accept:", err)
			return 1
		}
		cred, err := unix.GetsockoptUcred(nfd, unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil || int(cred.Uid) != uid {
			unix.Close(nfd)
			continue
		}
		mu.Lock()
		active++
		idle.Stop()
		release.Stop()
		startTrim()
		mu.Unlock()
		go func() {
			ctl := os.NewFile(uintptr(nfd), "ctl")
			// The greeting tells the supervisor this helper took it.
			if _, err := ctl.Write(hello); err == nil {
				// Greeted, the run goes on building its sandbox
				// while the binary is read back.
				mu.Lock()
				restoreBinary()
				mu.Unlock()
				serveConn(ctl)
			} else {
				ctl.Close()
			}
			mu.Lock()
			active--
			if active == 0 {
				exitAt = time.Now().Add(IdleExit)
				idle.Reset(IdleExit)
				release.Reset(ReleaseAfter)
			}
			mu.Unlock()
		}()
	}
}

// rehearse runs what greeting a sandbox takes (accept4, the peer's
// credentials, the greeting's write through the poller) on a socket pair
// of its own, right after releaseBinary: the pages that code needs come
// back, a few dozen KiB read one by one, so that a run waiting for the
// greeting does not wait for the disk too. (The accept fails: the socket
// does not listen; the listener is left to the accept loop.)
func rehearse() {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return
	}
	defer unix.Close(fds[1])
	unix.Accept4(fds[0], unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
	unix.GetsockoptUcred(fds[0], unix.SOL_SOCKET, unix.SO_PEERCRED)
	f := os.NewFile(uintptr(fds[0]), "rehearsal")
	f.Write(hello)
	f.Close()
}

var errRunning = errors.New("another helper serves this socket")

// hello is the greeting, made once: a run waits for it before its
// command starts, so it must need no more of the helper's code than the
// write, paged out or not (releaseBinary).
var hello = (&netpolicy.Message{Hello: true}).Marshal()

// listen binds sock, replacing a stale one that nobody answers on.
func listen(sock string) (int, error) {
	for attempt := 0; ; attempt++ {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		if err != nil {
			return -1, err
		}
		err = unix.Bind(fd, &unix.SockaddrUnix{Name: sock})
		if err == nil {
			if err = unix.Listen(fd, 1024); err == nil {
				return fd, nil
			}
		}
		unix.Close(fd)
		if err != unix.EADDRINUSE || attempt > 0 {
			return -1, fmt.Errorf("listening on %s: %w", sock, err)
		}
		c, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return -1, err
		}
		err = unix.Connect(c, &unix.SockaddrUnix{Name: sock})
		unix.Close(c)
		if err == nil {
			return -1, errRunning
		}
		unix.Unlink(sock)
	}
}
