package netpolicy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// maxViolations bounds the distinct violations kept for the summary;
// repeats only raise a Count.
const maxViolations = 1000

// Stack is the userspace network stack that terminates a sandbox's TUN
// device: every TCP connection, UDP flow and ping the sandbox starts ends
// here, and goes on from the host's own sockets only if the policy allows.
type Stack struct {
	cfg      Config
	tun      *os.File
	upstream []netip.AddrPort

	mu      sync.Mutex
	tcp     map[flowKey]*tcpConn
	udp     map[flowKey]*udpFlow
	learned map[netip.Addr]string // address -> the allowed name it answered
	viol    []Violation
	vindex  map[string]int
	closed  bool
	lst     []*os.File
	nextPub uint16

	// ctx ends at Close, which must not wait for host-side connects and
	// upstream DNS queries to time out.
	ctx    context.Context
	cancel context.CancelFunc
	// dnsSlots bounds the UDP DNS queries in flight upstream: each holds a
	// goroutine and a host socket.
	dnsSlots chan struct{}
	logMu    sync.Mutex // serializes writes to cfg.Log

	wg sync.WaitGroup
}

// flowKey identifies a flow by its sandbox end and its other end.
type flowKey struct{ in, out netip.AddrPort }

// Start serves the sandbox whose TUN device is tun (Start owns it) until
// Close.
func Start(ctx context.Context, cfg Config, tun *os.File) (*Stack, error) {
	s := &Stack{
		cfg: cfg, tun: tun,
		tcp: map[flowKey]*tcpConn{}, udp: map[flowKey]*udpFlow{},
		learned: map[netip.Addr]string{}, vindex: map[string]int{},
		nextPub: 40000, dnsSlots: make(chan struct{}, maxDNSInFlight),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.upstream = cfg.DNS
	if len(s.upstream) == 0 {
		s.upstream = hostResolvers("/etc/resolv.conf")
	}
	// A non-blocking copy of the descriptor goes on Go's poller.
	fd, err := unix.FcntlInt(tun.Fd(), unix.F_DUPFD_CLOEXEC, 3)
	tun.Close()
	if err == nil {
		err = unix.SetNonblock(fd, true)
	}
	if err != nil {
		return nil, fmt.Errorf("network: the TUN device: %w", err)
	}
	s.tun = os.NewFile(uintptr(fd), "tun")
	for _, p := range cfg.Publish {
		l, err := listenTCP(p.Host)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("publishing %s: %w", p.Host, err)
		}
		s.lst = append(s.lst, l)
		s.wg.Add(1)
		go s.serve(l, p)
	}
	s.wg.Add(1)
	go s.loop()
	return s, nil
}

// hostResolvers reads the nameservers of a resolv.conf.
func hostResolvers(path string) []netip.AddrPort {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []netip.AddrPort
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil {
				out = append(out, netip.AddrPortFrom(a.WithZone(""), 53))
			}
		}
	}
	return out
}

// Close stops the stack and drops every connection.
func (s *Stack) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	conns := make([]*tcpConn, 0, len(s.tcp))
	for _, c := range s.tcp {
		conns = append(conns, c)
	}
	flows := make([]*udpFlow, 0, len(s.udp))
	for _, f := range s.udp {
		flows = append(flows, f)
	}
	lst := s.lst
	s.mu.Unlock()
	s.cancel()
	for _, l := range lst {
		l.Close()
	}
	for _, c := range conns {
		c.mu.Lock()
		c.closeLocked()
		c.mu.Unlock()
	}
	for _, f := range flows {
		f.close()
	}
	err := s.tun.Close()
	s.wg.Wait()
	return err
}

// Violations returns what was blocked so far, first occurrence first.
func (s *Stack) Violations() []Violation {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Violation(nil), s.viol...)
}

// violate records v.
func (s *Stack) violate(v Violation) {
	v.Time = time.Now().UTC()
	key := v.Kind + "\x00" + v.Name + "\x00" + v.Addr
	s.mu.Lock()
	if i, ok := s.vindex[key]; ok {
		s.viol[i].Count++
		v.Count = s.viol[i].Count
	} else if len(s.viol) < maxViolations {
		v.Count = 1
		s.vindex[key] = len(s.viol)
		s.viol = append(s.viol, v)
	}
	w := s.cfg.Log
	s.mu.Unlock()
	if w != nil {
		b, _ := json.Marshal(v)
		// Violations come from the loop, DNS goroutines and connection
		// writers at once; Log need not be safe for concurrent use.
		s.logMu.Lock()
		w.Write(append(b, '\n'))
		s.logMu.Unlock()
	}
}

// loop reads the sandbox's packets.
func (s *Stack) loop() {
	defer s.wg.Done()
	buf := make([]byte, MTU+64)
	for {
		n, err := s.tun.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) || n == 0 && !errors.Is(err, unix.EINTR) {
				return
			}
			continue
		}
		p, ok := parseIP(buf[:n])
		if !ok || !p.src.IsValid() || (p.src != SandboxAddr && p.src != SandboxAddr6) {
			continue
		}
		switch p.proto {
		case protoTCP:
			s.tcpInput(&p)
		case protoUDP:
			s.udpInput(&p)
		case protoICMP, protoICMPv6:
			s.icmpInput(&p)
		}
	}
}

// write sends one packet to the sandbox.
func (s *Stack) write(pkt []byte) {
	s.tun.Write(pkt)
}

// special reports addresses the sandbox never reaches unless a rule
// allows them: the host's loopback, link-local (with the cloud metadata
// services), unspecified and multicast addresses.
func special(a netip.Addr) bool {
	return a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsUnspecified() || a.IsMulticast() ||
		a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() ||
		a == netip.AddrFrom16([16]byte{0xfd, 0x00, 0x0e, 0xc2, 14: 0x02, 15: 0x54}) // fd00:ec2::254
}

// decision is where a connection from the sandbox may go.
type decision struct {
	to   netip.AddrPort // the host-side destination
	name string         // the allowed name the address was learned from
	ok   bool
	v    Violation
}

// decide applies the policy to a connection or flow towards dst.
func (s *Stack) decide(kind string, dst netip.AddrPort) decision {
	a := dst.Addr().Unmap()
	d := decision{to: netip.AddrPortFrom(a, dst.Port())}
	v := Violation{Kind: kind, Addr: dst.String()}
	if kind == "icmp" {
		v.Addr = a.String()
	}
	block := func(rule, reason string) decision {
		v.Rule, v.Reason = rule, reason
		d.v = v
		return d
	}
	if s.cfg.Mode == None {
		// First: the host's loopback is on the link, reachable without a
		// default route, and --host-loopback needs outbound or allow.
		return block("", "the network is none: nothing goes out")
	}
	switch {
	case a == HostAddr || a == HostAddr6:
		if !s.cfg.HostLoopback {
			return block("", "the host's loopback is not reachable (--host-loopback is off)")
		}
		if a.Is4() {
			d.to = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), dst.Port())
		} else {
			d.to = netip.AddrPortFrom(netip.IPv6Loopback(), dst.Port())
		}
		d.ok = true
		return d
	case a == DNSAddr || a == DNSAddr6:
		return block("", "pinfold's DNS server only answers DNS on port 53")
	case inLink(a):
		return block("", "no host at this address")
	}
	if denied, rule := s.cfg.Rules.DeniedAddr(a); denied {
		return block(rule, "denied")
	}
	cidrOK, rule := s.cfg.Rules.Addr(a)
	if cidrOK {
		d.ok = true
		return d
	}
	if special(a) {
		return block("", "loopback, link-local and metadata addresses are not reachable unless --allow lists them")
	}
	if s.cfg.Mode == Outbound {
		d.ok = true
		return d
	}
	if (kind == "tcp" || kind == "udp") && (dst.Port() == 53 || dst.Port() == 853) {
		return block("", "DNS goes through pinfold's DNS server only")
	}
	s.mu.Lock()
	name, learned := s.learned[a]
	s.mu.Unlock()
	if !learned {
		return block(rule, "the address was not resolved from an allowed name and no --allow CIDR covers it")
	}
	d.name, d.ok = name, true
	return d
}

// nameVerdict applies the policy to a DNS name.
func (s *Stack) nameVerdict(name string) (ok bool, rule, reason string) {
	if s.cfg.Mode == None {
		return false, "", "the network is none: nothing goes out"
	}
	if denied, rule := s.cfg.Rules.DeniedName(name); denied {
		return false, rule, "denied"
	}
	if s.cfg.Mode == Outbound {
		return true, "", ""
	}
	if ok, rule := s.cfg.Rules.Name(name); ok {
		return true, rule, ""
	}
	return false, "", "not in the allow list"
}

// inLink reports the link's own addresses (other than the ones served).
func inLink(a netip.Addr) bool {
	return netip.PrefixFrom(SandboxAddr, Prefix4).Masked().Contains(a) ||
		netip.PrefixFrom(SandboxAddr6, Prefix6).Masked().Contains(a)
}

// learn remembers the addresses an allowed name resolved to.
func (s *Stack) learn(name string, addrs []netip.Addr) {
	s.mu.Lock()
	for _, a := range addrs {
		s.learned[a.Unmap()] = name
	}
	s.mu.Unlock()
}

// serve accepts connections to a published port.
func (s *Stack) serve(l *os.File, p Publish) {
	defer s.wg.Done()
	for {
		f, _, err := accept(l)
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		s.connectIn(f, p.Port)
	}
}

// ephemeral picks a source port on HostAddr for a published connection.
func (s *Stack) ephemeral(dst netip.AddrPort, src netip.Addr) (flowKey, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range 20000 {
		s.nextPub++
		if s.nextPub < 40000 {
			s.nextPub = 40000
		}
		k := flowKey{dst, netip.AddrPortFrom(src, s.nextPub)}
		if _, used := s.tcp[k]; !used {
			return k, true
		}
	}
	return flowKey{}, false
}
