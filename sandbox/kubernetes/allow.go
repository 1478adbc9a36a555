package kubernetes

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/pinfold/pinfold/internal/kube"
	"github.com/pinfold/pinfold/internal/netpolicy"
	"github.com/pinfold/pinfold/sandbox"
)

// egress turns the allow and deny lists of network allow into what a
// NetworkPolicy can hold: addresses. Names are resolved here, once, with
// this machine's resolver, and given to the pod as /etc/hosts entries;
// a wildcard cannot be resolved to addresses and is refused. Deny entries
// remove the addresses they name, or are excepted from the ranges that
// hold them.
func egress(ctx context.Context, np *sandbox.NetPolicy) ([]kube.Block, []kube.Host, error) {
	bad := func(format string, args ...any) error {
		return &sandbox.SpecError{Field: "network", Err: fmt.Errorf(format, args...)}
	}
	resolve := func(name string) ([]netip.Addr, error) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		res := net.DefaultResolver
		if len(np.DNS) > 0 {
			// The plan's resolver, as pinfold's own DNS server would ask.
			server := np.DNS[0]
			if _, _, err := net.SplitHostPort(server); err != nil {
				server = net.JoinHostPort(server, "53")
			}
			res = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, server)
			}}
		}
		addrs, err := res.LookupNetIP(ctx, "ip", name)
		if err != nil {
			return nil, bad("resolving %s for the pod's network policy: %w", name, err)
		}
		for i := range addrs {
			addrs[i] = addrs[i].Unmap()
		}
		return addrs, nil
	}
	prefixes := func(list []string, hosts *[]kube.Host) ([]netip.Prefix, error) {
		var ps []netip.Prefix
		for _, e := range list {
			e = strings.TrimSuffix(strings.TrimSpace(e), ".")
			// A NetworkPolicy holds addresses, not protocols: every
			// protocol reaches them, so "tcp:NAME" is NAME here.
			if len(e) >= len(netpolicy.RawPrefix) && strings.EqualFold(e[:len(netpolicy.RawPrefix)], netpolicy.RawPrefix) {
				e = strings.TrimSpace(e[len(netpolicy.RawPrefix):])
			}
			if p, err := netip.ParsePrefix(e); err == nil {
				ps = append(ps, p.Masked())
				continue
			}
			if a, err := netip.ParseAddr(e); err == nil {
				ps = append(ps, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
				continue
			}
			if strings.Contains(e, "*") {
				return nil, bad("%s: a wildcard names no addresses, and a NetworkPolicy holds addresses only (list the names)", e)
			}
			addrs, err := resolve(e)
			if err != nil {
				return nil, err
			}
			h := kube.Host{Name: strings.ToLower(e)}
			for _, a := range addrs {
				ps = append(ps, netip.PrefixFrom(a, a.BitLen()))
				h.Addrs = append(h.Addrs, a.String())
			}
			if hosts != nil {
				*hosts = append(*hosts, h)
			}
		}
		return ps, nil
	}
	var hosts []kube.Host
	allow, err := prefixes(np.Allow, &hosts)
	if err != nil {
		return nil, nil, err
	}
	deny, err := prefixes(np.Deny, nil)
	if err != nil {
		return nil, nil, err
	}
	var blocks []kube.Block
	for _, a := range allow {
		b := kube.Block{CIDR: a.String()}
		covered := false
		for _, d := range deny {
			switch {
			case d.Bits() <= a.Bits() && d.Contains(a.Addr()):
				covered = true
			case d.Bits() > a.Bits() && a.Contains(d.Addr()):
				b.Except = append(b.Except, d.String())
			}
		}
		if !covered && !slices.ContainsFunc(blocks, func(x kube.Block) bool { return x.CIDR == b.CIDR }) {
			blocks = append(blocks, b)
		}
	}
	// A name whose addresses are all denied is not given to the pod.
	for i := range hosts {
		hosts[i].Addrs = slices.DeleteFunc(hosts[i].Addrs, func(s string) bool {
			a := netip.MustParseAddr(s)
			return !slices.ContainsFunc(blocks, func(b kube.Block) bool { return netip.MustParsePrefix(b.CIDR).Contains(a) })
		})
	}
	hosts = slices.DeleteFunc(hosts, func(h kube.Host) bool { return len(h.Addrs) == 0 })
	return blocks, hosts, nil
}
