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
// network none TCP bind and connect denied too (ABI 4), unless pinfold's
// network stack serves the sandbox (noStack false: published ports). A session's agent forwards ports into the sandbox's loopback
// whatever its network, so sessions keep TCP.
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

// landlockTCP reports whether the ruleset denies TCP: network none without
// pinfold's stack (published ports), outside sessions, on ABI 4 or later.
func landlockTCP(sp *sandbox.Spec, noStack bool) bool {
	return sp.Network == sandbox.NetworkNone && noStack && !isSession(sp) &&
		landlock.HandledNet(landlock.Active()) != 0
}
