package netstack

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/pinfold/pinfold/internal/netpolicy"
)

const (
	udpIdle    = 60 * time.Second
	dnsTimeout = 3 * time.Second
)

// udpRequest handles the first datagram of a flow from the sandbox; false
// makes the stack answer "port unreachable".
func (s *Server) udpRequest(r *udp.ForwarderRequest) bool {
	id := r.ID()
	dst := netip.AddrPortFrom(addrOf(id.LocalAddress), id.LocalPort)
	if (dst.Addr() == netpolicy.DNSAddr || dst.Addr() == netpolicy.DNSAddr6) && dst.Port() == 53 {
		c := udpAccept(r)
		if c == nil {
			return true
		}
		s.serveDNS(c)
		return true
	}
	d := s.pol.Decide("udp", dst)
	if !d.OK {
		s.pol.Violate(d.V)
		return false
	}
	up, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(d.To))
	if err != nil {
		return false
	}
	c := udpAccept(r)
	if c == nil {
		up.Close()
		return true
	}
	if !s.onClose(func() { c.Close(); up.Close() }) {
		c.Close()
		up.Close()
		return true
	}
	// Both ways until the flow is idle a while (in both directions).
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	relay := func(dst io.Writer, src interface {
		io.Reader
		SetReadDeadline(time.Time) error
	}, done chan<- struct{}) {
		defer s.wg.Done()
		defer close(done)
		buf := make([]byte, 65536)
		for {
			src.SetReadDeadline(time.Now().Add(udpIdle))
			n, err := src.Read(buf)
			switch {
			case err == nil:
				last.Store(time.Now().UnixNano())
				dst.Write(buf[:n])
			case errors.Is(err, syscall.ECONNREFUSED):
				// An ICMP error from the far end: the flow goes on.
			case isTimeout(err) && time.Since(time.Unix(0, last.Load())) < udpIdle:
			default:
				return
			}
		}
	}
	a, b := make(chan struct{}), make(chan struct{})
	s.wg.Add(2)
	go relay(up, c, a)
	go relay(c, up, b)
	go func() {
		select {
		case <-a:
		case <-b:
		}
		c.Close()
		up.Close()
	}()
	return true
}

func udpAccept(r *udp.ForwarderRequest) *gonet.UDPConn {
	var wq waiter.Queue
	ep, e := r.CreateEndpoint(&wq)
	if e != nil {
		return nil
	}
	return gonet.NewUDPConn(&wq, ep)
}

// serveDNS answers the queries of one sandbox port, each in its own
// goroutine, until it is idle a while.
func (s *Server) serveDNS(c *gonet.UDPConn) {
	if !s.onClose(func() { c.Close() }) {
		c.Close()
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer c.Close()
		buf := make([]byte, 65536)
		for {
			c.SetReadDeadline(time.Now().Add(udpIdle))
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			select {
			case s.dnsSlots <- struct{}{}:
			default:
				continue // too many in flight: dropped, the client retries
			}
			q := append([]byte(nil), buf[:n]...)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer func() { <-s.dnsSlots }()
				if r := s.pol.Resolve(q, s.exchangeUDP); r != nil {
					c.Write(r)
				}
			}()
		}
	}()
}

// serveDNSStream answers DNS over TCP on one connection.
func (s *Server) serveDNSStream(c *gonet.TCPConn) {
	if !s.onClose(func() { c.Close() }) {
		c.Close()
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer c.Close()
		for {
			c.SetReadDeadline(time.Now().Add(udpIdle))
			q, err := readFrame(c)
			if err != nil {
				return
			}
			r := s.pol.Resolve(q, s.exchangeTCP)
			if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(r))), r...)); err != nil {
				return
			}
		}
	}()
}

// exchangeUDP asks the upstream resolvers in turn.
func (s *Server) exchangeUDP(q []byte) ([]byte, error) {
	var last error = errors.New("no upstream resolver")
	for _, up := range s.upstream {
		r, err := exchangeUDP(s.ctx, up, q)
		if err == nil {
			return r, nil
		}
		last = err
	}
	return nil, last
}

func (s *Server) exchangeTCP(q []byte) ([]byte, error) {
	var last error = errors.New("no upstream resolver")
	for _, up := range s.upstream {
		r, err := exchangeTCP(s, up, q)
		if err == nil {
			return r, nil
		}
		last = err
	}
	return nil, last
}

func exchangeUDP(ctx context.Context, to netip.AddrPort, q []byte) ([]byte, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(dnsTimeout))
	// Close does not wait for a resolver that does not answer.
	defer context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })()
	if _, err := c.Write(q); err != nil {
		return nil, err
	}
	buf := make([]byte, 65536)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil, err
		}
		if n >= 2 && buf[0] == q[0] && buf[1] == q[1] {
			return append([]byte(nil), buf[:n]...), nil
		}
	}
}

func exchangeTCP(s *Server, to netip.AddrPort, q []byte) ([]byte, error) {
	c, err := dial(s.ctx, to)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(dnsTimeout))
	defer context.AfterFunc(s.ctx, func() { c.SetDeadline(time.Unix(1, 0)) })()
	if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(q))), q...)); err != nil {
		return nil, err
	}
	return readFrame(c)
}

func readFrame(r io.Reader) ([]byte, error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}
