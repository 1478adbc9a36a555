package native

import (
	"os"
	"testing"

	"github.com/pinfold/pinfold/internal/landlock"
	"github.com/pinfold/pinfold/sandbox"
)

// The rules follow the plan: the base and read-only binds readable, the
// writable binds, overlays, /tmp and /dev writable, nothing else granted
// (the root's own directories only listed).
func TestLandlockRulesFollowThePlan(t *testing.T) {
	ro, rw, ws := t.TempDir(), t.TempDir(), t.TempDir()
	p := rootPlan{baseRoot: "/", hostBase: true, tmpSize: 1 << 20,
		binds:    []bind{{src: ro, dst: "/srv/ro", ro: true}, {src: rw, dst: "/srv/rw"}},
		overlays: []overlay{{lower: ws, upper: t.TempDir() + "/upper", work: t.TempDir() + "/work"}}}
	_, rules := buildRoot(&p)
	got := map[string]uint64{}
	for _, r := range rules {
		got[r.Path] |= r.Access
	}
	want := map[string]uint64{
		"/": landlock.ReadDir, "/srv/ro": landlock.Read, "/srv/rw": landlock.Read | landlock.Write,
		ws: landlock.Read | landlock.Write, "/tmp": landlock.Read | landlock.Write,
		"/dev": landlock.Read | landlock.Write, "/proc": landlock.Read | landlock.WriteFile | landlock.Truncate,
	}
	for _, d := range hostSystemDirs {
		if fi, err := os.Lstat("/" + d); err == nil && fi.IsDir() { // links are made, not granted
			want["/"+d] = landlock.Read
		}
	}
	for path, access := range want {
		if got[path] != access {
			t.Errorf("%s: granted %#x, want %#x", path, got[path], access)
		}
	}
	for path := range got {
		if _, ok := want[path]; !ok {
			t.Errorf("%s granted %#x, which the plan does not expose", path, got[path])
		}
	}

	// TCP is handled (denied) only for network none without the stack,
	// a network capability or a session (whose agent forwards ports into
	// loopback).
	t.Setenv(landlock.Env, "")
	if landlock.ABI() >= 4 {
		sp := &sandbox.Spec{Network: sandbox.NetworkNone}
		if l := landlockConfig(sp, true, rules); l == nil || l.HandledNet == 0 {
			t.Error("network none: TCP not handled")
		}
		if l := landlockConfig(sp, false, rules); l.HandledNet != 0 {
			t.Error("network none with published ports: TCP handled")
		}
		sp.Capabilities = []string{"NET_BIND_SERVICE"}
		if l := landlockConfig(sp, true, rules); l.HandledNet != 0 {
			t.Error("NET_BIND_SERVICE granted: TCP handled")
		}
		sp.Capabilities = nil
		sp.Mounts = []sandbox.Mount{{Source: "/bin/true", Target: "/.pinfold/agent", ReadOnly: true}}
		if l := landlockConfig(sp, true, rules); l.HandledNet != 0 {
			t.Error("a session: TCP handled")
		}
	}
	t.Setenv(landlock.Env, "0")
	if landlockConfig(&sandbox.Spec{}, true, rules) != nil {
		t.Error("PINFOLD_LANDLOCK=0: a ruleset all the same")
	}
}
