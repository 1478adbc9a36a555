package native

import (
	"github.com/pinfold/pinfold/internal/agent"
	initp "github.com/pinfold/pinfold/internal/backend/native"
	"github.com/pinfold/pinfold/internal/landlock"
	"github.com/pinfold/pinfold/sandbox"
)

// landlockConfig is the second layer of a sandbox, where the kernel has
// Landlock (and PINFOLD_LANDLOCK=0 does not turn it off): the rules the
// root's layout granted, every other filesystem access denied, and with
// network none TCP bind and connect denied too (ABI 4; see landlockTCP).
func landlockConfig(sp *sandbox.Spec, noStack bool, rules []initp.LandlockRule) *initp.Landlock {
	abi := landlock.Active()
	if abi == 0 {
		return nil
	}
	fs := landlock.HandledFS(abi)
	l := &initp.Landlock{HandledFS: fs, Rules: make([]initp.LandlockRule, 0, len(rules))}
	if landlockTCP(sp, noStack) {
		l.HandledNet = landlock.HandledNet(abi)
	}
	for _, r := range rules {
		if r.Access&fs != 0 {
			l.Rules = append(l.Rules, initp.LandlockRule{Path: r.Path, Access: r.Access & fs})
		}
	}
	return l
}

// isSession reports whether the sandbox runs pinfold's session agent.
func isSession(sp *sandbox.Spec) bool {
	for _, m := range sp.Mounts {
		if m.Target == agent.AgentPath {
			return true
		}
	}
	return false
}

// landlockTCP reports whether the ruleset denies TCP (ABI 4 or later):
// with network none, unless the plan asks for TCP inside the sandbox's own
// network all the same: published ports (pinfold's stack serves them), a
// session (its agent forwards ports into loopback), or a network
// capability granted (--cap-add NET_BIND_SERVICE to serve on port 80).
func landlockTCP(sp *sandbox.Spec, noStack bool) bool {
	const netCaps = 1<<10 | 1<<11 | 1<<12 | 1<<13 // NET_BIND_SERVICE, NET_BROADCAST, NET_ADMIN, NET_RAW
	caps, _ := capMask(sp.Capabilities)
	return sp.Network == sandbox.NetworkNone && noStack && !isSession(sp) && caps&netCaps == 0 &&
		landlock.HandledNet(landlock.Active()) != 0
}
