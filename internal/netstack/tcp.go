package netstack

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/pinfold/pinfold/internal/netpolicy"
)

const (
	dialTimeout = 15 * time.Second
	// silence is how long a guarded connection waits for the client's
	// first bytes before it opens the upstream connection anyway: the
	// server speaks first in some protocols (SMTP, FTP, MySQL). Only on a
	// name allowed raw (tcp:NAME): elsewhere only a client's TLS or HTTP
	// may open it. The client's bytes are still checked before any
	// reaches the server.
	silence = 300 * time.Millisecond
	// statusMax bounds the server's status line read after an upgrade.
	statusMax = 8 << 10
)

// tcpRequest handles a connection the sandbox opens.
func (s *Server) tcpRequest(r *tcp.ForwarderRequest) {
	id := r.ID()
	dst := netip.AddrPortFrom(addrOf(id.LocalAddress), id.LocalPort)
	if (dst.Addr() == netpolicy.DNSAddr || dst.Addr() == netpolicy.DNSAddr6) && dst.Port() == 53 {
		c, _, _ := accept(r)
		if c != nil {
			s.serveDNSStream(c)
		}
		return
	}
	d := s.pol.Decide("tcp", dst)
	if !d.OK {
		s.pol.Violate(d.V)
		r.Complete(true)
		return
	}
	if !d.Inspect {
		// The host side first, so that a refused or unreachable
		// destination looks the same inside.
		up, err := dial(s.ctx, d.To)
		if err != nil {
			r.Complete(true)
			return
		}
		c, ep, wq := accept(r)
		if c == nil {
			up.Close()
			return
		}
		s.relay(c, ep, wq, up)
		return
	}
	// The upstream connection waits for the name check, but a
	// destination the host has no route to is refused at once, as a
	// failed connect would be: clients then try the name's next address
	// (IPv4 after IPv6 on hosts without IPv6, say).
	if !routable(d.To) {
		r.Complete(true)
		return
	}
	c, ep, wq := accept(r)
	if c != nil {
		s.guarded(c, ep, wq, dst, d)
	}
}

// routable reports whether the host has a route to dst, without sending
// a packet (a UDP socket's connect only looks the route up).
func routable(dst netip.AddrPort) bool {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst.Addr(), 9)))
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// accept completes the sandbox's handshake.
func accept(r *tcp.ForwarderRequest) (*gonet.TCPConn, tcpip.Endpoint, *waiter.Queue) {
	wq := new(waiter.Queue)
	ep, e := r.CreateEndpoint(wq)
	if e != nil {
		r.Complete(true)
		return nil, nil, nil
	}
	r.Complete(false)
	ep.SocketOptions().SetKeepAlive(true)
	return gonet.NewTCPConn(wq, ep), ep, wq
}

// dial connects to dst from the host.
func dial(ctx context.Context, dst netip.AddrPort) (*net.TCPConn, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", dst.String())
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// halfCloser is a connection that can end one direction.
type halfCloser interface {
	io.ReadWriteCloser
	CloseWrite() error
}

// splice copies both ways until both ends are done.
func (s *Server) splice(c *gonet.TCPConn, up *net.TCPConn) {
	if !s.onClose(func() { c.Close(); up.Close() }) {
		c.Close()
		up.Close()
		return
	}
	s.wg.Add(2)
	var once sync.WaitGroup
	once.Add(2)
	half := func(dst halfCloser, src io.Reader) {
		defer s.wg.Done()
		defer once.Done()
		buf := make([]byte, 256<<10)
		io.CopyBuffer(dst, src, buf)
		dst.CloseWrite()
	}
	go half(up, c)
	go half(c, up)
	go func() {
		once.Wait()
		c.Close()
		up.Close()
	}()
}

// relay copies both ways between a sandbox's connection and the host's
// (see relay), until both ends are done.
func (s *Server) relay(c *gonet.TCPConn, ep tcpip.Endpoint, wq *waiter.Queue, up *net.TCPConn) {
	if !s.onClose(func() { c.Close(); up.Close() }) {
		c.Close()
		up.Close()
		return
	}
	r := &relay{s: s, ep: ep, wq: wq, up: up}
	s.wg.Add(2)
	var both sync.WaitGroup
	both.Add(2)
	half := func(copy func() error, closeWrite func()) {
		defer s.wg.Done()
		defer both.Done()
		if copy() != nil {
			closeWrite()
		}
	}
	go half(r.toSandbox, func() { ep.Shutdown(tcpip.ShutdownWrite) })
	go half(r.toHost, func() { up.CloseWrite() })
	go func() {
		both.Wait()
		c.Close()
		up.Close()
	}()
}

// guarded proxies a connection whose names the policy checks: nothing
// reaches the server, and the upstream connection is not even opened,
// before the Guard has passed what the client sent.
func (s *Server) guarded(c *gonet.TCPConn, ep tcpip.Endpoint, wq *waiter.Queue, dst netip.AddrPort, d netpolicy.Decision) {
	p := &guardedConn{s: s, c: c, ep: ep, wq: wq, dst: dst, d: d, g: s.pol.Guard(dst, d)}
	p.cond.L = &p.mu
	if !s.onClose(p.abort) {
		c.Close()
		return
	}
	s.wg.Add(1)
	s.guards.Add(1)
	go p.fromSandbox()
}

type guardedConn struct {
	s   *Server
	c   *gonet.TCPConn
	ep  tcpip.Endpoint
	wq  *waiter.Queue
	dst netip.AddrPort
	d   netpolicy.Decision

	mu     sync.Mutex
	cond   sync.Cond
	g      *netpolicy.Guard
	up     *net.TCPConn
	status []byte // the server's answer to an upgrade, until its first line
	done   bool
}

// reset ends the connection on the sandbox's side with a reset and
// returns the upstream one, if any.
func (p *guardedConn) reset() *net.TCPConn {
	p.mu.Lock()
	p.done = true
	up := p.up
	p.cond.Broadcast()
	p.mu.Unlock()
	p.ep.Abort()
	p.c.Close()
	return up
}

// abort resets the sandbox's connection and closes the upstream one.
func (p *guardedConn) abort() {
	if up := p.reset(); up != nil {
		up.Close()
	}
}

// endAfter resets the sandbox's connection once what passed before a
// refused request went upstream: the server gets an end of file after it,
// not a reset, which would make it drop what it has not read yet. The
// upstream connection goes when the server answers (toSandbox finds the
// sandbox gone) or, at the latest, after upstreamLinger.
func (p *guardedConn) endAfter() {
	if up := p.reset(); up != nil {
		up.CloseWrite()
		time.AfterFunc(upstreamLinger, func() { up.Close() })
	}
}

// upstreamLinger bounds how long a server may take over the requests
// that passed before a refused one.
const upstreamLinger = 2 * time.Second

// fromSandbox reads the client's bytes, checks them, and writes what
// passes to the server, opening the upstream connection on the first.
func (p *guardedConn) fromSandbox() {
	defer p.s.wg.Done()
	defer p.s.guards.Done()
	// A small buffer while the client is quiet; a pooled large one while
	// a read fills the small one (an upload), given back after the first
	// read that does not fill it: an idle connection holds 4 KiB.
	small := make([]byte, 4<<10)
	var big *[]byte
	defer func() {
		if big != nil {
			buffers.Put(big)
		}
	}()
	p.c.SetReadDeadline(time.Now().Add(silence))
	first := true
	for {
		buf := small
		if big != nil {
			buf = *big
		}
		n, err := p.c.Read(buf)
		var giveBack *[]byte // after buf[:n] has passed
		switch {
		case n == len(buf) && big == nil:
			big = buffers.Get().(*[]byte)
		case n < len(buf) && big != nil:
			giveBack, big = big, nil
		}
		if first && n == 0 && isTimeout(err) {
			first = false
			p.c.SetReadDeadline(time.Time{})
			if !p.g.Raw {
				// Only TLS and HTTP, whose clients speak first, may
				// reach this server: wait for the client.
				continue
			}
			// The server speaks first (SSH, SMTP): connect, keep
			// checking.
			if !p.connect() {
				return
			}
			continue
		}
		if first {
			first = false
			p.c.SetReadDeadline(time.Time{})
		}
		ok := n == 0 || p.pass(buf[:n])
		if giveBack != nil {
			buffers.Put(giveBack)
		}
		if !ok {
			return
		}
		if err != nil {
			p.mu.Lock()
			up := p.up
			p.mu.Unlock()
			if up != nil {
				up.CloseWrite()
			} else {
				p.c.Close() // nothing was sent: nothing to connect for
			}
			return
		}
	}
}

// pass feeds b to the guard and writes what it lets through.
func (p *guardedConn) pass(b []byte) bool {
	p.mu.Lock()
	out, err := p.g.Feed(b)
	for err == nil && p.g.Waiting() && !p.done {
		// An upgrade request went out: the next bytes wait for the
		// server's answer (see toSandbox).
		if len(out) > 0 {
			break
		}
		p.cond.Wait()
		out, err = p.g.Feed(nil)
	}
	p.mu.Unlock()
	if err != nil {
		// What was checked before the refused part still goes (a
		// pipelined request before a refused one), then the connection
		// is reset.
		p.s.pol.Refused(p.dst, p.d, err)
		if len(out) > 0 && p.write(out) {
			p.endAfter()
		} else {
			p.abort()
		}
		return false
	}
	if len(out) == 0 {
		return true
	}
	if !p.write(out) {
		return false
	}
	// Bytes held behind an upgrade request go once the server answered.
	p.mu.Lock()
	waiting := p.g.Waiting()
	p.mu.Unlock()
	if waiting {
		return p.pass(nil)
	}
	return true
}

// write sends what the guard passed, opening the upstream connection
// first if need be.
func (p *guardedConn) write(out []byte) bool {
	p.mu.Lock()
	up := p.up
	p.mu.Unlock()
	if up == nil {
		if !p.connect() {
			return false
		}
		p.mu.Lock()
		up = p.up
		p.mu.Unlock()
	}
	if _, err := up.Write(out); err != nil {
		p.abort()
		return false
	}
	return true
}

// connect opens the upstream connection and starts copying its bytes to
// the sandbox.
func (p *guardedConn) connect() bool {
	up, err := dial(p.s.ctx, p.d.To)
	if err != nil {
		p.abort()
		return false
	}
	p.mu.Lock()
	if p.done {
		p.mu.Unlock()
		up.Close()
		return false
	}
	p.up = up
	p.mu.Unlock()
	p.s.wg.Add(1)
	go p.toSandbox(up)
	return true
}

// toSandbox copies the server's bytes to the sandbox, telling the guard
// the status line that answers an upgrade request. Outside an upgrade the
// stack reads them from the socket itself, as a relay does (see fill);
// the check of Waiting and that read are under p.mu, which the guard's
// Feed takes: an answer to an upgrade request cannot be queued before
// the request was sent, which is after Feed said Waiting.
func (p *guardedConn) toSandbox(up *net.TCPConn) {
	defer p.s.wg.Done()
	rc, err := up.SyscallConn()
	if err != nil {
		p.abort()
		return
	}
	e, ch := waiter.NewChannelEntry(waiter.WritableEvents | waiter.EventHUp | waiter.EventErr)
	p.wq.EventRegister(&e)
	defer p.wq.EventUnregister(&e)
	for {
		var f fill
		waiting := false
		err := rc.Read(func(fd uintptr) bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			if waiting = p.g.Waiting(); waiting {
				return true
			}
			return f.from(int(fd), p.ep)
		})
		if err == nil && waiting {
			if p.upgradeAnswer(up) {
				continue
			}
			return
		}
		if err == nil && f.rerr == nil && !f.eof {
			if _, ok := f.werr.(*tcpip.ErrWouldBlock); ok {
				select {
				case <-ch:
				case <-p.s.ctx.Done():
					p.abort()
					return
				}
				continue
			}
			if f.werr == nil {
				continue
			}
			p.abort() // the sandbox's side is gone
			return
		}
		// The server's end (or an error): release a waiting client.
		p.mu.Lock()
		if p.g.Waiting() {
			p.g.Response(nil)
			p.cond.Broadcast()
		}
		p.mu.Unlock()
		p.c.CloseWrite()
		return
	}
}

// upgradeAnswer reads the server's bytes while the guard waits for the answer to
// an upgrade request, gives it the status line, and passes them on; false
// when the connection is over.
func (p *guardedConn) upgradeAnswer(up *net.TCPConn) bool {
	bp := buffers.Get().(*[]byte)
	defer buffers.Put(bp)
	buf := *bp
	n, err := up.Read(buf)
	if n > 0 {
		p.mu.Lock()
		if p.g.Waiting() {
			p.status = append(p.status, buf[:n]...)
			if i := bytes.IndexByte(p.status, '\n'); i >= 0 || len(p.status) > statusMax {
				if i < 0 {
					i = len(p.status)
				}
				p.g.Response(p.status[:i])
				p.status = nil
				p.cond.Broadcast()
			}
		}
		p.mu.Unlock()
		if _, werr := p.c.Write(buf[:n]); werr != nil {
			p.abort()
			return false
		}
	}
	if err != nil {
		p.mu.Lock()
		if p.g.Waiting() {
			// No answer will come: release the waiting client.
			p.g.Response(nil)
			p.cond.Broadcast()
		}
		p.mu.Unlock()
		p.c.CloseWrite()
		return false
	}
	return true
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded)
}
