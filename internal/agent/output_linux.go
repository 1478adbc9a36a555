package agent

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// How long the output of what a command leaves running is waited for once
// the command has ended and all it wrote itself has been copied: while
// bytes keep coming, at most drainGrace apart, up to drainTail after the
// end. Only a pipe held open by such a process is ever given up on; the
// exit then says Truncated.
const (
	drainGrace = 250 * time.Millisecond
	drainTail  = 2 * time.Second
)

// outCopy copies a command's output (a pipe's read end, or a terminal's
// master) to frames. The exit must not be sent before it has finished:
// frames after the exit are lost to the client.
type outCopy struct {
	f    *os.File
	w    io.Writer
	done chan struct{}
	cut  bool // set before done closes

	mu   sync.Mutex
	shut bool // finish gave up: what is read later is dropped
}

func startCopy(f *os.File, w io.Writer) *outCopy {
	o := &outCopy{f: f, w: w, done: make(chan struct{})}
	go o.run()
	return o
}

// finish is called once the command has ended: it waits until everything
// the command wrote has been copied, and what a process it left running
// writes for as long as drainGrace and drainTail allow. It says whether
// output was cut off.
func (o *outCopy) finish() bool {
	// A deadline in the past wakes the copier: the command ended.
	if err := o.f.SetReadDeadline(time.Unix(1, 0)); err != nil {
		// Not pollable (never for the agent's own pipes and terminal):
		// bounded all the same.
		select {
		case <-o.done:
			return o.cut
		case <-time.After(drainTail):
			o.mu.Lock()
			o.shut = true
			o.mu.Unlock()
			return true
		}
	}
	<-o.done
	return o.cut
}

func (o *outCopy) write(b []byte) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.shut {
		return errors.New("output given up")
	}
	_, err := o.w.Write(b)
	return err
}

func (o *outCopy) run() {
	defer close(o.done)
	defer o.f.Close()
	buf := make([]byte, 32<<10)
	var (
		ended time.Time // when the copier heard the command ended
		owed  int       // bytes the ended command left queued, not yet copied
	)
	for {
		n, err := o.f.Read(buf)
		if n > 0 {
			owed -= n
			if o.write(buf[:n]) != nil {
				return // the client is gone
			}
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			// The end of the pipe (every writer closed it), or EIO of a
			// terminal whose last holder closed it: all was copied.
			return
		}
		if ended.IsZero() {
			if err == nil {
				continue
			}
			// The only deadline before the end is finish's: the command
			// ended, so what it wrote is all queued in the pipe now, and
			// none of it may be lost, however slow the client.
			ended, owed = time.Now(), queued(o.f)
		} else if err != nil && owed <= 0 && queued(o.f) == 0 {
			// drainGrace without a byte, the pipe still open: a process
			// the command left running holds it.
			o.cut = true
			return
		}
		if owed > 0 {
			// Queued bytes: a read returns at once.
			o.f.SetReadDeadline(time.Time{})
			continue
		}
		if time.Since(ended) >= drainTail {
			o.cut = true // what is left running keeps writing
			return
		}
		o.f.SetReadDeadline(time.Now().Add(drainGrace))
	}
}

// queued is the number of bytes waiting to be read from f (FIONREAD: a pipe or a
// terminal's master); 0 when it cannot tell.
func queued(f *os.File) int {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	rc.Control(func(fd uintptr) {
		if v, err := unix.IoctlGetInt(int(fd), unix.TIOCINQ); err == nil && v > 0 {
			n = v
		}
	})
	return n
}

// outputPipes gives cmd pipes of the agent's own for stdout and stderr and
// returns their read ends, with their write ends (the parent's copies,
// which it closes once the command started). os/exec's own copying is
// cut off WaitDelay after the exit, and a copier starved of processor time
// for that long loses what the command wrote.
func outputPipes(cmd *exec.Cmd) (reads, writes []*os.File, err error) {
	for range 2 {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(reads)
			closeAll(writes)
			return nil, nil, err
		}
		reads, writes = append(reads, r), append(writes, w)
	}
	cmd.Stdout, cmd.Stderr = writes[0], writes[1]
	return reads, writes, nil
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// pollableTerminal returns a copy of the terminal's master ptmx that the
// runtime's poller serves (deadlines work on it), and closes ptmx, which
// the pty package put in blocking mode.
func pollableTerminal(ptmx *os.File) (*os.File, error) {
	defer ptmx.Close()
	fd, err := unix.FcntlInt(ptmx.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "ptmx"), nil
}

// setSize sets the terminal's size without taking it out of the poller
// (pty.Setsize would, through Fd).
func setSize(f *os.File, rows, cols uint16) {
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
		})
	}
}
