package native

import (
	"io"
	"os"
	"time"

	"github.com/pinfold/pinfold/sandbox"
	"golang.org/x/sys/unix"
)

// stdio is the standard streams handed to one command.
type stdio struct {
	files   [3]*os.File // what the command gets
	closers []*os.File  // our copies of the command's ends, closed after start
	copies  int         // goroutines copying pipes
	done    chan error
	// ttyOut is closed when the terminal's output has been copied.
	ttyOut chan struct{}
}

// pipe returns a blocking pipe. Unlike os.Pipe it does not register with
// the runtime's poller, so neither end turns non-blocking under the command.
func pipe() (r, w *os.File, err error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, err
	}
	return os.NewFile(uintptr(fds[0]), "|0"), os.NewFile(uintptr(fds[1]), "|1"), nil
}

// openStdio prepares the command's standard streams.
func (p *Process) openStdio(c *sandbox.Cmd) (*stdio, error) {
	s := &stdio{done: make(chan error, 3)}
	if c.TTY || (c.Stdin == nil && c.Stdout == nil && c.Stderr == nil) {
		return s, nil // a terminal, or /dev/null opened by the init
	}
	var devnull *os.File
	null := func() (*os.File, error) {
		if devnull == nil {
			// Opened with a plain system call: os.OpenFile would try to
			// register it with the runtime's poller (four more calls).
			fd, err := unix.Open(os.DevNull, unix.O_RDWR|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, &os.PathError{Op: "open", Path: os.DevNull, Err: err}
			}
			f := os.NewFile(uintptr(fd), os.DevNull)
			devnull = f
			s.closers = append(s.closers, f)
		}
		return devnull, nil
	}
	var err error
	switch in := c.Stdin.(type) {
	case *os.File:
		s.files[0] = in
	case nil:
		if s.files[0], err = null(); err != nil {
			return nil, err
		}
	default:
		r, w, e := pipe()
		if e != nil {
			return nil, e
		}
		s.files[0] = r
		s.closers = append(s.closers, r)
		s.copies++
		go func() {
			_, err := io.Copy(w, in)
			w.Close()
			if err != nil && isBrokenPipe(err) {
				err = nil // the command stopped reading
			}
			s.done <- err
		}()
	}
	outs := [2]io.Writer{c.Stdout, c.Stderr}
	for i, out := range outs {
		fd := i + 1
		switch o := out.(type) {
		case *os.File:
			s.files[fd] = o
		case nil:
			if s.files[fd], err = null(); err != nil {
				s.abort()
				return nil, err
			}
		default:
			r, w, e := pipe()
			if e != nil {
				s.abort()
				return nil, e
			}
			s.files[fd] = w
			s.closers = append(s.closers, w)
			s.copies++
			go func() {
				_, err := io.Copy(o, r)
				r.Close()
				s.done <- err
			}()
		}
	}
	return s, nil
}

// copyTTY connects the command's terminal to the caller's streams: input
// is copied until the terminal closes or stdin ends (not waited for: a
// read of the caller's stdin cannot be interrupted), output until the
// terminal closes, which wait waits for.
func (s *stdio) copyTTY(pty *os.File, in io.Reader, out io.Writer) {
	if out != nil {
		s.ttyOut = make(chan struct{})
		go func() {
			copyUntilClosed(out, pty)
			close(s.ttyOut)
		}()
	}
	if in != nil {
		go func() {
			last := &lastByte{w: pty, b: '\n'}
			if !copyUntilClosed(last, in) {
				return
			}
			// The input ended (a file or pipe on a terminal run): the
			// terminal's end-of-file character says so to the command, as
			// a person's Ctrl-D would; without it a command reading its
			// input would wait forever. Only in canonical mode, where it
			// means that (raw, it would be a stray byte), and twice after
			// a line without its newline: once to hand the line over,
			// once for the end.
			t, err := unix.IoctlGetTermios(int(pty.Fd()), unix.TCGETS)
			if err != nil || t.Lflag&unix.ICANON == 0 {
				return
			}
			eof := t.Cc[unix.VEOF]
			if eof == 0 {
				eof = 4
			}
			if last.b != '\n' {
				pty.Write([]byte{eof})
			}
			pty.Write([]byte{eof})
		}()
	}
}

// lastByte passes writes on and keeps the last byte written.
type lastByte struct {
	w io.Writer
	b byte
}

func (l *lastByte) Write(p []byte) (int, error) {
	n, err := l.w.Write(p)
	if n > 0 {
		l.b = p[n-1]
	}
	return n, err
}

// copyUntilClosed copies until either side fails (EIO from a terminal
// once the sandbox is gone), and says whether src ended (EOF).
func copyUntilClosed(dst io.Writer, src io.Reader) (eof bool) {
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return false
			}
		}
		if err != nil {
			return err == io.EOF
		}
	}
}

// started closes this process's copies of the command's ends, so pipes see
// end-of-file once the sandbox is gone.
func (s *stdio) started() {
	for _, f := range s.closers {
		f.Close()
	}
	s.closers = nil
}

// abort releases everything when the command never started.
func (s *stdio) abort() { s.started() }

// wait waits for the pipe copies to finish.
func (s *stdio) wait() error {
	if s.ttyOut != nil {
		// The terminal's output ends once every process holding it is
		// gone, which the init ensures before it reports.
		select {
		case <-s.ttyOut:
		case <-time.After(2 * time.Second):
		}
	}
	var first error
	for i := 0; i < s.copies; i++ {
		if err := <-s.done; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func isBrokenPipe(err error) bool {
	pe, ok := err.(*os.PathError)
	return ok && pe.Err == unix.EPIPE
}
