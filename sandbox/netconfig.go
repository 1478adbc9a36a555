package sandbox

import (
	"errors"

	"github.com/pinfold/pinfold/internal/netpolicy"
)

// NetConfig turns the spec's network into what pinfold's userspace stack
// enforces, or nil when the sandbox needs no stack (none without published
// ports, or host).
func (sp *Spec) NetConfig() (*netpolicy.Config, error) {
	n := &sp.Net
	if sp.Network == NetworkHost {
		if len(n.Publish) > 0 {
			return nil, &SpecError{Field: "network", Err: errors.New("--publish has no effect with the host's network: the command's ports are the host's already")}
		}
		return nil, nil
	}
	if sp.Network == NetworkNone && len(n.Publish) == 0 {
		return nil, nil // the rest of NetPolicy has nothing to act on
	}
	allow := n.Allow
	if sp.Network != NetworkAllow {
		allow = nil
	}
	rules, err := netpolicy.ParseRules(allow, n.Deny)
	if err != nil {
		return nil, &SpecError{Field: "network", Err: err}
	}
	c := &netpolicy.Config{Mode: netpolicy.Mode(sp.Network), Rules: rules, HostLoopback: n.HostLoopback, Log: n.Log}
	for _, p := range n.Publish {
		pp, err := netpolicy.ParsePublish(p)
		if err != nil {
			return nil, &SpecError{Field: "network", Err: err}
		}
		c.Publish = append(c.Publish, pp)
	}
	for _, d := range n.DNS {
		ap, err := netpolicy.ParseDNS(d)
		if err != nil {
			return nil, &SpecError{Field: "network", Err: err}
		}
		c.DNS = append(c.DNS, ap)
	}
	return c, nil
}
