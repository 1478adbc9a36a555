package agent

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/pinfold/pinfold/internal/untrusted"
)

// Conn is one exec on a session's agent.
type Conn struct {
	c  *net.UnixConn
	r  *bufio.Reader
	fw *frameWriter
}

// ExecStreams are the streams of an exec.
type ExecStreams struct {
	Stdin          io.Reader // nil: /dev/null
	Stdout, Stderr io.Writer
}

// dial connects to the agent's socket at path. The sandbox can write the
// run directory that holds it: a link planted in its place is refused,
// never followed to a socket of the host.
func dial(ctx context.Context, path string) (*net.UnixConn, error) {
	return untrusted.DialUnix(ctx, path)
}

// Call sends a request other than exec and returns the agent's answer.
func Call(ctx context.Context, sock string, req *Request) (json.RawMessage, error) {
	c, err := dial(ctx, sock)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if err := writeRequest(c, req); err != nil {
		return nil, err
	}
	t, b, err := readFrame(bufio.NewReader(c), nil)
	if err != nil {
		return nil, err
	}
	if t == FrameExit {
		var e Exit
		json.Unmarshal(b, &e)
		return nil, errors.New(e.Error)
	}
	return json.RawMessage(b), nil
}

// StartExec asks the agent at sock to run req and returns the connection
// that streams it.
func StartExec(ctx context.Context, sock string, req *Request) (*Conn, error) {
	req.Op = "exec"
	c, err := dial(ctx, sock)
	if err != nil {
		return nil, err
	}
	if err := writeRequest(c, req); err != nil {
		c.Close()
		return nil, err
	}
	return &Conn{c: c, r: bufio.NewReaderSize(c, 64<<10), fw: &frameWriter{w: c}}, nil
}

// Signal sends sig to the command's process group.
func (x *Conn) Signal(sig syscall.Signal) error {
	return x.fw.frame(FrameSignal, []byte{byte(sig)})
}

// Resize changes the command's terminal size.
func (x *Conn) Resize(rows, cols uint16) error {
	var b [4]byte
	binary.BigEndian.PutUint16(b[:], rows)
	binary.BigEndian.PutUint16(b[2:], cols)
	return x.fw.frame(FrameResize, b[:])
}

// Stdin returns a writer that feeds the command's stdin; Close ends it.
func (x *Conn) Stdin() io.WriteCloser { return stdinWriter{x} }

type stdinWriter struct{ x *Conn }

func (s stdinWriter) Write(b []byte) (int, error) {
	if err := s.x.fw.frame(FrameStdin, b); err != nil {
		return 0, err
	}
	return len(b), nil
}
func (s stdinWriter) Close() error { return s.x.fw.frame(FrameStdinEOF, nil) }

// Close drops the connection (the agent hangs up a command still running).
func (x *Conn) Close() error { return x.c.Close() }

// Wait copies the command's output to stdout and stderr until it ends,
// and returns how it ended. started, when set, hears the command's pid.
func (x *Conn) Wait(stdout, stderr io.Writer, started func(pid string)) (*Exit, error) {
	var buf []byte
	for {
		t, b, err := readFrame(x.r, buf)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, errors.New("the session ended during the command")
			}
			return nil, err
		}
		buf = b
		switch t {
		case FrameStdout:
			if stdout != nil {
				stdout.Write(b)
			}
		case FrameStderr:
			if stderr != nil {
				stderr.Write(b)
			}
		case FrameStarted:
			if started != nil {
				started(string(b))
			}
		case FrameExit:
			var e Exit
			if err := json.Unmarshal(b, &e); err != nil {
				return nil, fmt.Errorf("reading the exit status: %w", err)
			}
			return &e, nil
		}
	}
}

// Exec runs req on the agent at sock with streams s and returns how it
// ended. Cancelling ctx hangs the command up.
func Exec(ctx context.Context, sock string, req *Request, s ExecStreams) (*Exit, error) {
	req.Stdin = s.Stdin != nil
	x, err := StartExec(ctx, sock, req)
	if err != nil {
		return nil, err
	}
	defer x.Close()
	if s.Stdin != nil {
		go func() {
			io.Copy(x.Stdin(), s.Stdin)
			x.Stdin().Close()
		}()
	}
	stop := context.AfterFunc(ctx, func() { x.c.SetReadDeadline(time.Now()) })
	defer stop()
	e, err := x.Wait(s.Stdout, s.Stderr, nil)
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return e, err
}

// Next reads the agent's next frame as it is (for proxies).
func (x *Conn) Next() (byte, []byte, error) { return readFrame(x.r, nil) }

// Send sends a frame to the agent as it is (for proxies): stdin,
// end of stdin, a signal or a size.
func (x *Conn) Send(t byte, b []byte) error {
	switch t {
	case FrameStdin, FrameStdinEOF, FrameSignal, FrameResize:
		return x.fw.frame(t, b)
	}
	return fmt.Errorf("frame type %q cannot be sent", t)
}
