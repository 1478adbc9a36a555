package netpolicy

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

const (
	udpIdle     = 60 * time.Second
	dnsTimeout  = 3 * time.Second
	maxUDPFlows = 1024
	// maxDNSInFlight is far above what resolvers in the sandbox ask at
	// once; beyond it queries are dropped and the clients retry.
	maxDNSInFlight = 256
)

// udpFlow is a host socket connected to one destination for one sandbox
// port (or the ping socket of an echo id).
type udpFlow struct {
	s      *Stack
	key    flowKey
	proto  uint8
	f      *os.File
	id     uint16 // ICMP: the sandbox's echo id
	mu     sync.Mutex
	last   time.Time
	closed bool
}

func (f *udpFlow) close() {
	f.mu.Lock()
	if !f.closed {
		f.closed = true
		f.f.Close()
	}
	f.mu.Unlock()
}

// udpInput handles a datagram from the sandbox.
func (s *Stack) udpInput(p *packet) {
	if len(p.l4) < udpHeader {
		return
	}
	sp, dp := be.Uint16(p.l4), be.Uint16(p.l4[2:])
	ul := int(be.Uint16(p.l4[4:]))
	if ul < udpHeader || ul > len(p.l4) {
		return
	}
	payload := p.l4[udpHeader:ul]
	key := flowKey{netip.AddrPortFrom(p.src, sp), netip.AddrPortFrom(p.dst, dp)}
	if (p.dst == DNSAddr || p.dst == DNSAddr6) && dp == 53 {
		select {
		case s.dnsSlots <- struct{}{}:
		default:
			return // too many in flight: dropped, the client retries
		}
		q := append([]byte(nil), payload...)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.dnsSlots }()
			if r := s.resolve(q, false); r != nil {
				s.writeUDP(key, r)
			}
		}()
		return
	}
	s.mu.Lock()
	fl := s.udp[key]
	s.mu.Unlock()
	if fl == nil {
		d := s.decide("udp", key.out)
		if !d.ok {
			s.violate(d.v)
			s.unreachable(p)
			return
		}
		if fl = s.newFlow(key, d.to, protoUDP, 0); fl == nil {
			return
		}
	}
	fl.mu.Lock()
	fl.last = time.Now()
	fl.mu.Unlock()
	fl.f.Write(payload)
}

// newFlow connects a host socket for key and starts relaying replies.
func (s *Stack) newFlow(key flowKey, to netip.AddrPort, proto uint8, id uint16) *udpFlow {
	sp := unix.IPPROTO_UDP
	if proto == protoICMP {
		sp = unix.IPPROTO_ICMP
	} else if proto == protoICMPv6 {
		sp = unix.IPPROTO_ICMPV6
	}
	f, err := dialDgram(to, sp)
	if err != nil {
		return nil
	}
	fl := &udpFlow{s: s, key: key, proto: proto, f: f, id: id, last: time.Now()}
	s.mu.Lock()
	if s.closed || len(s.udp) >= maxUDPFlows {
		s.mu.Unlock()
		f.Close()
		return nil
	}
	s.udp[key] = fl
	s.mu.Unlock()
	s.wg.Add(1)
	go fl.relay()
	return fl
}

// relay copies replies to the sandbox until the flow has been idle a while.
func (fl *udpFlow) relay() {
	s := fl.s
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		if s.udp[fl.key] == fl {
			delete(s.udp, fl.key)
		}
		s.mu.Unlock()
		fl.close()
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
			if errors.Is(err, unix.ECONNREFUSED) {
				continue
			}
			return
		}
		if fl.proto == protoUDP {
			s.writeUDP(fl.key, buf[:n])
		} else {
			s.writeEcho(fl, buf[:n])
		}
	}
}

// writeUDP sends payload from key.out to key.in.
func (s *Stack) writeUDP(key flowKey, payload []byte) {
	src, dst := key.out.Addr(), key.in.Addr()
	hl := ipHeaderLen(dst.Is6())
	buf := make([]byte, hl+udpHeader+len(payload))
	u := buf[hl:]
	be.PutUint16(u, key.out.Port())
	be.PutUint16(u[2:], key.in.Port())
	be.PutUint16(u[4:], uint16(udpHeader+len(payload)))
	copy(u[udpHeader:], payload)
	be.PutUint16(u[6:], l4Checksum(src, dst, protoUDP, u))
	writeIP(buf, src, dst, protoUDP, len(u))
	s.write(buf)
}

// unreachable answers a blocked UDP datagram with ICMP port unreachable
// (IPv4) or "administratively prohibited" (IPv6), so that tools fail fast.
func (s *Stack) unreachable(p *packet) {
	if p.src.Is4() {
		ihl := 20
		orig := p.l4
		// ICMP carries the original IP header and 8 bytes.
		body := make([]byte, 8+ihl+min(len(orig), 8))
		body[0], body[1] = 3, 3
		hdr := make([]byte, 20)
		writeIP(hdr, p.src, p.dst, p.proto, len(orig))
		copy(body[8:], hdr)
		copy(body[8+ihl:], orig[:min(len(orig), 8)])
		be.PutUint16(body[2:], ^fold(sum(body, 0)))
		buf := make([]byte, 20+len(body))
		copy(buf[20:], body)
		writeIP(buf, p.dst, p.src, protoICMP, len(body))
		s.write(buf)
		return
	}
	orig := p.l4
	body := make([]byte, 8+40+min(len(orig), 8))
	body[0], body[1] = 1, 1
	hdr := make([]byte, 40)
	writeIP(hdr, p.src, p.dst, p.proto, len(orig))
	copy(body[8:], hdr)
	copy(body[48:], orig[:min(len(orig), 8)])
	be.PutUint16(body[2:], l4Checksum(p.dst, p.src, protoICMPv6, body))
	buf := make([]byte, 40+len(body))
	copy(buf[40:], body)
	writeIP(buf, p.dst, p.src, protoICMPv6, len(body))
	s.write(buf)
}

// icmpInput relays echo requests the policy allows through the host's
// ping sockets; everything else is dropped.
func (s *Stack) icmpInput(p *packet) {
	if len(p.l4) < 8 {
		return
	}
	echo := (p.proto == protoICMP && p.l4[0] == 8) || (p.proto == protoICMPv6 && p.l4[0] == 128)
	if !echo {
		return // router solicitations, MLD reports and the like
	}
	id := be.Uint16(p.l4[4:])
	key := flowKey{netip.AddrPortFrom(p.src, id), netip.AddrPortFrom(p.dst, 0)}
	s.mu.Lock()
	fl := s.udp[key]
	s.mu.Unlock()
	if fl == nil {
		d := s.decide("icmp", key.out)
		if !d.ok {
			s.violate(d.v)
			return
		}
		if fl = s.newFlow(key, d.to, p.proto, id); fl == nil {
			return
		}
	}
	fl.mu.Lock()
	fl.last = time.Now()
	fl.mu.Unlock()
	// The kernel sets the id of a ping socket's echo itself and fixes the
	// checksum.
	fl.f.Write(p.l4)
}

// writeEcho returns an echo reply from a ping socket with the sandbox's id.
func (s *Stack) writeEcho(fl *udpFlow, b []byte) {
	if len(b) < 8 {
		return
	}
	src, dst := fl.key.out.Addr(), fl.key.in.Addr()
	hl := ipHeaderLen(dst.Is6())
	buf := make([]byte, hl+len(b))
	m := buf[hl:]
	copy(m, b)
	be.PutUint16(m[4:], fl.id)
	m[2], m[3] = 0, 0
	if fl.proto == protoICMP {
		be.PutUint16(m[2:], ^fold(sum(m, 0)))
	} else {
		be.PutUint16(m[2:], l4Checksum(src, dst, protoICMPv6, m))
	}
	writeIP(buf, src, dst, fl.proto, len(m))
	s.write(buf)
}

// resolve answers one DNS query: a refusal for names the policy blocks,
// otherwise the upstream resolver's answer, whose addresses become
// reachable.
func (s *Stack) resolve(q []byte, stream bool) []byte {
	_, qn, err := ParseQuery(q)
	if err != nil {
		return Reply(q, RcodeServFail)
	}
	if ok, rule, reason := s.nameVerdict(qn.Name); !ok {
		s.violate(Violation{Kind: "dns", Name: qn.Name, Rule: rule, Reason: reason})
		return Reply(q, RcodeNXDomain)
	}
	var resp []byte
	for _, up := range s.upstream {
		if stream {
			resp, err = exchangeTCP(s.ctx, up, q)
		} else {
			resp, err = exchangeUDP(s.ctx, up, q)
		}
		if err == nil {
			break
		}
	}
	if resp == nil {
		return Reply(q, RcodeServFail)
	}
	if addrs, _, err := Answers(resp); err == nil && len(addrs) > 0 {
		s.learn(qn.Name, addrs)
	}
	return resp
}

// exchangeUDP sends q to a resolver and waits for the matching answer.
func exchangeUDP(ctx context.Context, to netip.AddrPort, q []byte) ([]byte, error) {
	f, err := dialDgram(to, unix.IPPROTO_UDP)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	f.SetDeadline(time.Now().Add(dnsTimeout))
	defer cancelIO(ctx, f)()
	if _, err := f.Write(q); err != nil {
		return nil, err
	}
	buf := make([]byte, 65536)
	for {
		n, err := f.Read(buf)
		if err != nil {
			return nil, err
		}
		if n >= 2 && buf[0] == q[0] && buf[1] == q[1] {
			return append([]byte(nil), buf[:n]...), nil
		}
	}
}

// exchangeTCP asks a resolver over TCP (for answers too big for UDP).
func exchangeTCP(ctx context.Context, to netip.AddrPort, q []byte) ([]byte, error) {
	dctx, cancel := context.WithTimeout(ctx, dnsTimeout)
	f, err := dialTCP(dctx, to)
	cancel()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	f.SetDeadline(time.Now().Add(dnsTimeout))
	defer cancelIO(ctx, f)()
	msg := binary.BigEndian.AppendUint16(nil, uint16(len(q)))
	if _, err := f.Write(append(msg, q...)); err != nil {
		return nil, err
	}
	return readFrame(f)
}

func readFrame(r io.Reader) ([]byte, error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	b := make([]byte, be.Uint16(l[:]))
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// dnsStream returns one end of a socket pair whose other end serves DNS
// over TCP for a connection from the sandbox to pinfold's DNS server.
func (s *Stack) dnsStream() (*os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	srv := os.NewFile(uintptr(fds[1]), "dns")
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer srv.Close()
		for {
			srv.SetReadDeadline(time.Now().Add(udpIdle))
			q, err := readFrame(srv)
			if err != nil {
				return
			}
			r := s.resolve(q, true)
			if r == nil {
				return
			}
			out := binary.BigEndian.AppendUint16(nil, uint16(len(r)))
			if _, err := srv.Write(append(out, r...)); err != nil {
				return
			}
		}
	}()
	return os.NewFile(uintptr(fds[0]), "dns"), nil
}
