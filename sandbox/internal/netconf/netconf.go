// Package netconf turns a sandbox.Spec's network into what pinfold's
// userspace stack enforces, and the stack's reports back into
// sandbox.Violations. It is shared by the runtimes that run that stack
// (sandbox/native, sandbox/container) and kept out of package sandbox so
// that the public API names no internal package.
package netconf

import (
	"errors"

	"github.com/pinfold/pinfold/internal/netpolicy"
	"github.com/pinfold/pinfold/sandbox"
)

// Config returns the stack's configuration for sp's network, or nil when
// the sandbox needs no stack (none without published ports, or host).
func Config(sp *sandbox.Spec) (*netpolicy.Config, error) {
	n := &sp.Net
	if sp.Network == sandbox.NetworkHost {
		if len(n.Publish) > 0 {
			return nil, &sandbox.SpecError{Field: "network", Err: errors.New("--publish has no effect with the host's network: the command's ports are the host's already")}
		}
		return nil, nil
	}
	if sp.Network == sandbox.NetworkNone && len(n.Publish) == 0 {
		return nil, nil // the rest of NetPolicy has nothing to act on
	}
	allow := n.Allow
	if sp.Network != sandbox.NetworkAllow {
		allow = nil
	}
	rules, err := netpolicy.ParseRules(allow, n.Deny)
	if err != nil {
		return nil, &sandbox.SpecError{Field: "network", Err: err}
	}
	c := &netpolicy.Config{Mode: netpolicy.Mode(sp.Network), Rules: rules, HostLoopback: n.HostLoopback, Log: n.Log}
	for _, p := range n.Publish {
		pp, err := netpolicy.ParsePublish(p)
		if err != nil {
			return nil, &sandbox.SpecError{Field: "network", Err: err}
		}
		c.Publish = append(c.Publish, pp)
	}
	for _, d := range n.DNS {
		ap, err := netpolicy.ParseDNS(d)
		if err != nil {
			return nil, &sandbox.SpecError{Field: "network", Err: err}
		}
		c.DNS = append(c.DNS, ap)
	}
	return c, nil
}

// Violations converts the stack's reports; nil stays nil.
func Violations(vs []netpolicy.Violation) []sandbox.Violation {
	if vs == nil {
		return nil
	}
	out := make([]sandbox.Violation, len(vs))
	for i, v := range vs {
		out[i] = sandbox.Violation(v)
	}
	return out
}
