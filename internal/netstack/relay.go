package netstack

import (
	"errors"
	"io"
	"net"
	"sync"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/waiter"
)

// A relay moves a connection's bytes between the stack's endpoint and the
// host's socket, holding no buffer while the connection idles. The stack
// reads what the host socket holds straight into the segments it sends
// (Endpoint.Write with the socket as its Payloader: one copy, where a
// copy through a buffer of ours made two); what the sandbox sends goes
// through a pooled buffer taken only once the endpoint has bytes (see
// toHost). Both sides are non-blocking: a goroutine per direction waits
// in the runtime's poller or on the endpoint's waiter queue.
type relay struct {
	s  *Server
	ep tcpip.Endpoint
	wq *waiter.Queue
	up *net.TCPConn
}

// toSandbox copies the host socket's bytes into the endpoint until the
// host's end of file (passed on as the endpoint's) or an error.
func (r *relay) toSandbox() error {
	rc, err := r.up.SyscallConn()
	if err != nil {
		return err
	}
	e, ch := waiter.NewChannelEntry(waiter.WritableEvents | waiter.EventHUp | waiter.EventErr)
	r.wq.EventRegister(&e)
	defer r.wq.EventUnregister(&e)
	for {
		var f fill
		err := rc.Read(func(fd uintptr) bool { return f.from(int(fd), r.ep) })
		switch {
		case err != nil:
			return err
		case f.rerr != nil:
			return f.rerr
		case f.eof:
			r.ep.Shutdown(tcpip.ShutdownWrite)
			return nil
		}
		if _, ok := f.werr.(*tcpip.ErrWouldBlock); ok {
			// The sandbox's window and the send buffer are full.
			select {
			case <-ch:
			case <-r.s.ctx.Done():
				return r.s.ctx.Err()
			}
			continue
		}
		if f.werr != nil {
			return errors.New(f.werr.String())
		}
	}
}

// fill is one step of a copy from a host socket into an endpoint.
type fill struct {
	werr tcpip.Error // the endpoint's
	rerr error       // the socket's
	eof  bool        // the socket's end of file
}

// from moves what the non-blocking socket fd holds into ep, as a
// syscall.RawConn's Read callback: false when there is nothing yet (wait
// in the poller).
func (f *fill) from(fd int, ep tcpip.Endpoint) bool {
	n, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
	if err != nil {
		f.rerr = err
		return true
	}
	if n == 0 {
		// Nothing queued: the end of file, or nothing yet.
		var b [1]byte
		m, _, err := unix.Recvfrom(fd, b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case err == unix.EAGAIN || err == unix.EINTR:
			return false
		case err != nil:
			f.rerr = err
		case m == 0:
			f.eof = true
		}
		return true // m > 0: arrived since; ask again
	}
	_, f.werr = ep.Write(&socketPayload{fd: fd, n: n}, tcpip.WriteOptions{})
	return true
}

// toHost copies what the sandbox sends into the host socket until the
// sandbox's end of file (passed on as the socket's) or an error. It takes
// a buffer from the pool only once the endpoint has bytes: one write of
// up to copyBuffer bytes moves the host's side further per system call
// than a write per segment from inside the stack's Read, which also held
// the endpoint's lock while the host's receiver ran.
func (r *relay) toHost() error {
	e, ch := waiter.NewChannelEntry(waiter.ReadableEvents | waiter.EventHUp | waiter.EventErr)
	r.wq.EventRegister(&e)
	defer r.wq.EventUnregister(&e)
	for {
		if r.ep.Readiness(waiter.ReadableEvents|waiter.EventHUp|waiter.EventErr) == 0 {
			// Nothing to read, nor an end: wait without a buffer.
			select {
			case <-ch:
			case <-r.s.ctx.Done():
				return r.s.ctx.Err()
			}
			continue
		}
		bp := buffers.Get().(*[]byte)
		w := sliceWriter{b: (*bp)[:0]}
		_, rerr := r.ep.Read(&w, tcpip.ReadOptions{})
		if len(w.b) > 0 {
			_, err := r.up.Write(w.b)
			buffers.Put(bp)
			if err != nil {
				return err
			}
			continue
		}
		buffers.Put(bp)
		switch rerr.(type) {
		case *tcpip.ErrWouldBlock:
			select {
			case <-ch:
			case <-r.s.ctx.Done():
				return r.s.ctx.Err()
			}
		case *tcpip.ErrClosedForReceive:
			return r.up.CloseWrite()
		default:
			return errors.New(rerr.String())
		}
	}
}

// copyBuffer is the most a copy through a buffer moves at once.
const copyBuffer = 256 << 10

// buffers are the copy buffers, held only while bytes move.
var buffers = sync.Pool{New: func() any { b := make([]byte, copyBuffer); return &b }}

// sliceWriter appends to b up to its capacity.
type sliceWriter struct{ b []byte }

func (w *sliceWriter) Write(p []byte) (int, error) {
	n := min(len(p), cap(w.b)-len(w.b))
	w.b = append(w.b, p[:n]...)
	if n < len(p) {
		return n, io.ErrShortWrite
	}
	return n, nil
}

// socketPayload is the n bytes a non-blocking socket holds (SIOCINQ),
// read as the stack copies them into its segments: each read finds them
// queued, so it never waits, and the stack asks for no more than n.
type socketPayload struct {
	fd int
	n  int
}

func (p *socketPayload) Len() int { return p.n }

func (p *socketPayload) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	for {
		n, err := unix.Read(p.fd, b[:min(len(b), p.n)])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			// A reset, say: never io.EOF, which the stack would take
			// for a short payload and ask again, forever.
			return 0, err
		case n == 0:
			return 0, errShortPayload
		}
		p.n -= n
		return n, nil
	}
}

var errShortPayload = errors.New("the socket ended before its queued bytes were read")
