package netpolicy

import (
	"encoding/json"
	"io"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// maxViolations bounds the distinct violations kept for the summary;
// repeats only raise a Count.
const maxViolations = 1000

// Policy is the state of one sandbox's network policy while it runs: the
// addresses allowed names resolved to, and what was blocked. The network
// stack asks it about every name, connection, flow and ping.
type Policy struct {
	cfg Config
	// HostAddr reports the host's own addresses (any interface), which
	// the sandbox reaches only with HostLoopback; nil knows none.
	HostAddr func(netip.Addr) bool
	// OnViolation, when set, hears each violation as it happens (after
	// Config.Log).
	OnViolation func(Violation)

	mu      sync.Mutex
	learned map[netip.Addr]string // address -> the allowed name it answered
	// raw: addresses a "tcp:" allow entry's name resolved to, which may
	// carry protocols the guard does not read. Kept once learned: another
	// name resolving to the same address does not take it back.
	raw    map[netip.Addr]bool
	viol   []Violation
	vindex map[string]int
	logMu  sync.Mutex // serializes writes to cfg.Log
}

// NewPolicy returns the policy of cfg.
func NewPolicy(cfg Config) *Policy {
	return &Policy{cfg: cfg, learned: map[netip.Addr]string{}, raw: map[netip.Addr]bool{}, vindex: map[string]int{}}
}

// Config returns what the policy enforces.
func (p *Policy) Config() Config { return p.cfg }

// Violations returns what was blocked so far, first occurrence first.
func (p *Policy) Violations() []Violation {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Violation(nil), p.viol...)
}

// Violate records v.
func (p *Policy) Violate(v Violation) {
	if v.Time.IsZero() {
		v.Time = time.Now().UTC()
	}
	key := v.Kind + "\x00" + v.Name + "\x00" + v.Addr
	p.mu.Lock()
	if i, ok := p.vindex[key]; ok {
		p.viol[i].Count++
		v.Count = p.viol[i].Count
	} else if len(p.viol) < maxViolations {
		v.Count = 1
		p.vindex[key] = len(p.viol)
		p.viol = append(p.viol, v)
	}
	w, on := p.cfg.Log, p.OnViolation
	p.mu.Unlock()
	if w != nil {
		writeViolation(&p.logMu, w, v)
	}
	if on != nil {
		on(v)
	}
}

// writeViolation writes v as a JSON line; the writer need not be safe for
// concurrent use, mu serializes.
func writeViolation(mu *sync.Mutex, w io.Writer, v Violation) {
	b, _ := json.Marshal(v)
	mu.Lock()
	w.Write(append(b, '\n'))
	mu.Unlock()
}

// special reports addresses the sandbox never reaches unless a rule
// allows them: the host's loopback, link-local (with the cloud metadata
// services), unspecified and multicast addresses.
func special(a netip.Addr) bool {
	return a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsUnspecified() || a.IsMulticast() ||
		a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() ||
		a == netip.AddrFrom16([16]byte{0xfd, 0x00, 0x0e, 0xc2, 14: 0x02, 15: 0x54}) // fd00:ec2::254
}

// Decision is where a connection, flow or ping from the sandbox may go.
type Decision struct {
	To   netip.AddrPort // the host-side destination
	Name string         // the allowed name the address was learned from
	OK   bool
	// Inspect: check the TLS server name or HTTP Host of a connection
	// (a Guard), since the address was allowed for a name.
	Inspect bool
	V       Violation // what to record when not OK
}

// Decide applies the policy to a connection or flow ("tcp", "udp") or a
// ping ("icmp") towards dst.
func (p *Policy) Decide(kind string, dst netip.AddrPort) Decision {
	a := dst.Addr().Unmap()
	d := Decision{To: netip.AddrPortFrom(a, dst.Port())}
	v := Violation{Kind: kind, Addr: dst.String()}
	if kind == "icmp" {
		v.Addr = a.String()
	}
	block := func(rule, reason string) Decision {
		v.Rule, v.Reason = rule, reason
		d.V = v
		return d
	}
	if p.cfg.Mode == None {
		// First: the host's loopback is on the link, reachable without a
		// default route, and --host-loopback needs outbound or allow.
		return block("", "the network is none: nothing goes out")
	}
	switch {
	case a == HostAddr || a == HostAddr6:
		if !p.cfg.HostLoopback {
			return block("", "the host's loopback is not reachable (--host-loopback is off)")
		}
		if a.Is4() {
			d.To = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), dst.Port())
		} else {
			d.To = netip.AddrPortFrom(netip.IPv6Loopback(), dst.Port())
		}
		d.OK = true
		return d
	case a == DNSAddr || a == DNSAddr6:
		return block("", "pinfold's DNS server only answers DNS on port 53")
	case inLink(a):
		return block("", "no host at this address")
	}
	if denied, rule := p.cfg.Rules.DeniedAddr(a); denied {
		return block(rule, "denied")
	}
	if p.HostAddr != nil && p.HostAddr(a) && !p.cfg.HostLoopback {
		// A name that resolves to the host itself would reach services
		// bound to 0.0.0.0 or ::.
		return block("", "the host's own addresses are not reachable (--host-loopback is off)")
	}
	cidrOK, rule := p.cfg.Rules.Addr(a)
	if cidrOK {
		d.OK = true
		return d
	}
	if special(a) {
		return block("", "loopback, link-local and metadata addresses are not reachable unless --allow lists them")
	}
	if p.cfg.Mode == Outbound {
		d.OK = true
		return d
	}
	if (kind == "tcp" || kind == "udp") && (dst.Port() == 53 || dst.Port() == 853) {
		return block("", "DNS goes through pinfold's DNS server only")
	}
	p.mu.Lock()
	name, learned := p.learned[a]
	p.mu.Unlock()
	if !learned {
		return block(rule, "the address was not resolved from an allowed name and no --allow CIDR covers it")
	}
	d.Name, d.OK, d.Inspect = name, true, kind == "tcp"
	return d
}

// NameVerdict applies the policy to a DNS name.
func (p *Policy) NameVerdict(name string) (ok bool, rule, reason string) {
	if p.cfg.Mode == None {
		return false, "", "the network is none: nothing goes out"
	}
	if denied, rule := p.cfg.Rules.DeniedName(name); denied {
		return false, rule, "denied"
	}
	if p.cfg.Mode == Outbound {
		return true, "", ""
	}
	if ok, rule := p.cfg.Rules.Name(name); ok {
		return true, rule, ""
	}
	return false, "", "not in the allow list"
}

// Learn remembers the addresses an allowed name resolved to.
func (p *Policy) Learn(name string, addrs []netip.Addr) {
	raw := p.cfg.Rules.RawTCP(name)
	p.mu.Lock()
	for _, a := range addrs {
		p.learned[a.Unmap()] = name
		if raw {
			p.raw[a.Unmap()] = true
		}
	}
	p.mu.Unlock()
}

// Guard returns the checker of a connection d allowed towards dst: the
// names it may ask for are the allowed ones, and an address literal
// (Host: 192.0.2.7) only one an --allow address or CIDR covers: the
// address an allowed name resolved to is not enough, since a request
// without the name gets the server's default site, which may be another
// tenant's. Protocols the guard does not read pass only to addresses a
// "tcp:" entry's name resolved to. Refusals are recorded as violations.
func (p *Policy) Guard(dst netip.AddrPort, d Decision) *Guard {
	p.mu.Lock()
	raw := p.raw[dst.Addr().Unmap()]
	p.mu.Unlock()
	return &Guard{Raw: raw, Allowed: func(host string) bool {
		if a, err := netip.ParseAddr(host); err == nil {
			ok, _ := p.cfg.Rules.Addr(a.Unmap())
			return ok
		}
		ok, _, _ := p.NameVerdict(host)
		return ok
	}}
}

// Refused records a guard's refusal of a connection d allowed for a name.
func (p *Policy) Refused(dst netip.AddrPort, d Decision, err error) {
	v := Violation{Kind: "tcp", Addr: dst.String(), Reason: err.Error() + " (the address was resolved for " + d.Name + ")"}
	if ge, ok := err.(*GuardError); ok {
		v.Name = ge.Name
		if ge.Name != "" {
			_, v.Rule, _ = p.NameVerdict(ge.Name)
		}
	}
	p.Violate(v)
}

// inLink reports the link's own addresses (other than the ones served).
func inLink(a netip.Addr) bool {
	return netip.PrefixFrom(SandboxAddr, Prefix4).Masked().Contains(a) ||
		netip.PrefixFrom(SandboxAddr6, Prefix6).Masked().Contains(a)
}

// Resolve answers one DNS query from the sandbox: a refusal for names the
// policy blocks, otherwise the answer exchange gets from an upstream
// resolver, whose addresses become reachable.
func (p *Policy) Resolve(q []byte, exchange func(q []byte) ([]byte, error)) []byte {
	_, qn, err := ParseQuery(q)
	if err != nil {
		return Reply(q, RcodeServFail)
	}
	if qn.Name == "localhost" || strings.HasSuffix(qn.Name, ".localhost") {
		// The sandbox's own loopback, whatever the lists say (RFC 6761):
		// no violation, nothing asked upstream.
		if qn.Class != dnsClassIN {
			return Reply(q, RcodeNXDomain)
		}
		return LoopbackReply(q, qn.Type)
	}
	if ok, rule, reason := p.NameVerdict(qn.Name); !ok {
		p.Violate(Violation{Kind: "dns", Name: qn.Name, Rule: rule, Reason: reason})
		return Reply(q, RcodeNXDomain)
	}
	resp, err := exchange(q)
	if err != nil || resp == nil {
		return Reply(q, RcodeServFail)
	}
	if addrs, _, err := Answers(resp); err == nil && len(addrs) > 0 {
		p.Learn(qn.Name, addrs)
	}
	return resp
}
