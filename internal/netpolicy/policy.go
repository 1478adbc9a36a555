package netpolicy

import (
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Mode is a sandbox's network mode.
type Mode string

const (
	// None: an own network namespace with loopback only.
	None Mode = "none"
	// Host: the host's network namespace.
	Host Mode = "host"
	// Outbound: everything outside through pinfold, nothing inbound
	// except published ports.
	Outbound Mode = "outbound"
	// Allow: outbound only to the allow list.
	Allow Mode = "allow"
)

// ParseMode checks a --network value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case None, Host, Outbound, Allow:
		return m, nil
	}
	return "", fmt.Errorf("unknown network mode %q (want none, host, outbound or allow)", s)
}

// The sandbox side of the link. The sandbox is SandboxAddr on a /24 whose
// .2 is the host (its loopback, with HostLoopback) and .3 pinfold's DNS
// server; the IPv6 side mirrors it in a unique local /64.
var (
	SandboxAddr  = netip.AddrFrom4([4]byte{10, 0, 2, 100})
	HostAddr     = netip.AddrFrom4([4]byte{10, 0, 2, 2})
	DNSAddr      = netip.AddrFrom4([4]byte{10, 0, 2, 3})
	SandboxAddr6 = netip.AddrFrom16([16]byte{0xfd, 0x70, 0, 0x66, 14: 0x01})
	HostAddr6    = netip.AddrFrom16([16]byte{0xfd, 0x70, 0, 0x66, 15: 0x02})
	DNSAddr6     = netip.AddrFrom16([16]byte{0xfd, 0x70, 0, 0x66, 15: 0x03})
)

// Link prefix lengths and the device the sandbox sees.
const (
	Prefix4 = 24
	Prefix6 = 64
	MTU     = 65520
	Device  = "eth0"
)

// Publish forwards Host (a host address and port) to Port inside.
type Publish struct {
	Host netip.AddrPort
	Port uint16
}

func (p Publish) String() string { return fmt.Sprintf("%s->%d", p.Host, p.Port) }

// ParsePublish parses -p/--publish: [HOSTADDR:]HOSTPORT:PORT, with an IPv6
// HOSTADDR in brackets. The host address defaults to 127.0.0.1.
func ParsePublish(s string) (Publish, error) {
	bad := func(why string) (Publish, error) {
		return Publish{}, fmt.Errorf("bad --publish %q: %s (want [HOSTADDR:]HOSTPORT:PORT, e.g. 8080:80 or 0.0.0.0:8080:80)", s, why)
	}
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return bad("no sandbox port")
	}
	port, err := parsePort(s[i+1:])
	if err != nil {
		return bad(err.Error())
	}
	rest := s[:i]
	host := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	if j := strings.LastIndexByte(rest, ':'); j >= 0 {
		h := strings.TrimSuffix(strings.TrimPrefix(rest[:j], "["), "]")
		if host, err = netip.ParseAddr(h); err != nil {
			return bad("host address " + strconv.Quote(h) + " is not an IP address")
		}
		rest = rest[j+1:]
	}
	hport, err := parsePort(rest)
	if err != nil {
		return bad(err.Error())
	}
	return Publish{Host: netip.AddrPortFrom(host, hport), Port: port}, nil
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", s)
	}
	return uint16(n), nil
}

// ParseDNS parses --dns: an IP address with an optional port (53).
func ParseDNS(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("bad --dns %q: want an IP address with an optional port, e.g. 192.0.2.53 or [2001:db8::53]:5353", s)
	}
	return netip.AddrPortFrom(a, 53), nil
}

// Config is what a Stack enforces.
type Config struct {
	Mode  Mode // Outbound or Allow; None with Publish gives inbound only
	Rules Rules
	// HostLoopback makes HostAddr (HostAddr6) reach the host's 127.0.0.1
	// (::1).
	HostLoopback bool
	Publish      []Publish
	// DNS are the upstream resolvers; empty means the host's
	// /etc/resolv.conf.
	DNS []netip.AddrPort
	// Log receives every violation as a JSON line as it happens.
	Log io.Writer
}

// Violation is one blocked name or connection.
type Violation struct {
	Time   time.Time `json:"time"`
	Kind   string    `json:"kind"` // dns, tcp, udp or icmp
	Name   string    `json:"name,omitempty"`
	Addr   string    `json:"addr,omitempty"` // address:port, or the address for icmp
	Rule   string    `json:"rule,omitempty"` // the --deny entry that matched
	Reason string    `json:"reason"`
	Count  int       `json:"count"`
}

// What names the blocked target for a summary line.
func (v *Violation) What() string {
	switch {
	case v.Name != "" && v.Addr != "":
		return v.Name + " (" + v.Addr + ")"
	case v.Name != "":
		return v.Name
	}
	return v.Addr
}

// DeniedName reports whether a deny entry matches a DNS name.
func (r *Rules) DeniedName(name string) (denied bool, rule string) {
	rule, denied = firstName(r.Deny, lowerASCII(strings.TrimSuffix(name, ".")))
	return denied, rule
}
