package netstack

import (
	"errors"
	"net/netip"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/link/nested"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// echoTap takes ICMP echo requests off the link before the stack sees
// them: the stack, which answers for every address, would reply to any
// ping itself. Pings the policy allows go out through the host's ping
// sockets instead, and their replies come back as the far end's.
//
// It also holds the device's reader back until the stack is configured
// (Attach, start).
type echoTap struct {
	nested.Endpoint
	s *Server

	mu      sync.Mutex
	held    stack.NetworkDispatcher // the NIC, until start
	started bool
}

// Attach implements stack.LinkEndpoint. The NIC attaches as the stack
// creates it, and the device's reader would start there and then, before
// the stack answers for every address and has its forwarders: what it
// read meanwhile (the packet that woke AttachOnTraffic, and those queued
// behind it) was dropped, or a datagram got "port unreachable", which a
// UDP client does not retry. So the NIC is passed on only by start; until
// then the packets wait in the device's queue.
func (t *echoTap) Attach(d stack.NetworkDispatcher) {
	t.mu.Lock()
	if d != nil && !t.started {
		t.held = d
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	t.Endpoint.Attach(d)
}

// start lets the device's reader deliver to the NIC.
func (t *echoTap) start() {
	t.mu.Lock()
	t.started = true
	d := t.held
	t.held = nil
	t.mu.Unlock()
	if d != nil {
		t.Endpoint.Attach(d)
	}
}

// DeliverNetworkPacket implements stack.NetworkDispatcher.
func (t *echoTap) DeliverNetworkPacket(p tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	if t.s.echo(pkt) {
		return
	}
	t.Endpoint.DeliverNetworkPacket(p, pkt)
}

type echoKey struct {
	src netip.Addr
	id  uint16
	dst netip.Addr
}

// echoFlow is the host ping socket of one sandbox echo id and target.
type echoFlow struct {
	key   echoKey
	proto uint8
	f     *os.File
	mu    sync.Mutex
	last  time.Time
}

// echo handles pkt when it is an echo request and reports whether it did.
func (s *Server) echo(pkt *stack.PacketBuffer) bool {
	head, ok := pkt.Data().PullUp(min(pkt.Data().Size(), 48))
	if !ok || len(head) < 28 {
		return false
	}
	switch head[0] >> 4 {
	case 4:
		ihl := int(head[0]&15) * 4
		if head[9] != protoICMP || len(head) <= ihl || head[ihl] != 8 {
			return false
		}
	case 6:
		if len(head) < 48 || head[6] != protoICMPv6 || head[40] != 128 {
			return false
		}
	default:
		return false
	}
	b := pkt.Data().AsRange().ToSlice()
	p, ok := parseIP(b)
	if !ok || len(p.l4) < 8 {
		return true // a malformed echo: dropped
	}
	id := be.Uint16(p.l4[4:])
	key := echoKey{p.src, id, p.dst}
	s.mu.Lock()
	fl := s.echoFlows[key]
	s.mu.Unlock()
	if fl == nil {
		d := s.pol.Decide("icmp", netip.AddrPortFrom(p.dst, 0))
		if !d.OK {
			s.pol.Violate(d.V)
			return true
		}
		if fl = s.newEcho(key, d.To.Addr(), p.proto); fl == nil {
			return true
		}
	}
	fl.mu.Lock()
	fl.last = time.Now()
	fl.mu.Unlock()
	// The kernel sets the id of a ping socket's echo itself and fixes the
	// checksum.
	fl.f.Write(p.l4)
	return true
}

// newEcho opens a ping socket to dst and relays its replies.
func (s *Server) newEcho(key echoKey, dst netip.Addr, proto uint8) *echoFlow {
	fam, sp := unix.AF_INET, unix.IPPROTO_ICMP
	var sa unix.Sockaddr = &unix.SockaddrInet4{Addr: dst.As4()}
	if !dst.Is4() {
		fam, sp = unix.AF_INET6, unix.IPPROTO_ICMPV6
		sa = &unix.SockaddrInet6{Addr: dst.As16()}
	}
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, sp)
	if err != nil {
		return nil
	}
	if err := unix.Connect(fd, sa); err != nil {
		unix.Close(fd)
		return nil
	}
	fl := &echoFlow{key: key, proto: proto, f: os.NewFile(uintptr(fd), "ping"), last: time.Now()}
	s.mu.Lock()
	if s.closed || len(s.echoFlows) >= 256 {
		s.mu.Unlock()
		fl.f.Close()
		return nil
	}
	s.echoFlows[key] = fl
	s.closers = append(s.closers, func() { fl.f.Close() })
	s.mu.Unlock()
	s.wg.Add(1)
	go s.echoReplies(fl)
	return fl
}

// echoReplies writes the replies of fl's socket to the sandbox until it is
// idle a while.
func (s *Server) echoReplies(fl *echoFlow) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		if s.echoFlows[fl.key] == fl {
			delete(s.echoFlows, fl.key)
		}
		s.mu.Unlock()
		fl.f.Close()
	}()
	buf := make([]byte, 65536)
	for {
		fl.f.SetReadDeadline(time.Now().Add(udpIdle))
		n, err := fl.f.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				fl.mu.Lock()
				idle := time.Since(fl.last) >= udpIdle
				fl.mu.Unlock()
				if !idle {
					continue
				}
			}
			return
		}
		if n < 8 {
			continue
		}
		src, dst := fl.key.dst, fl.key.src
		hl := ipHeaderLen(dst.Is6())
		out := make([]byte, hl+n)
		m := out[hl:]
		copy(m, buf[:n])
		be.PutUint16(m[4:], fl.key.id)
		m[2], m[3] = 0, 0
		if fl.proto == protoICMP {
			be.PutUint16(m[2:], ^fold(sum(m, 0)))
		} else {
			be.PutUint16(m[2:], l4Checksum(src, dst, protoICMPv6, m))
		}
		writeIP(out, src, dst, fl.proto, len(m))
		unix.Write(s.tunFD, out)
	}
}
