package doctor

import (
	"context"
	"strconv"
	"strings"

	"github.com/pinfold/pinfold/internal/preflight"
	"golang.org/x/sys/unix"
)

// host is where the checks look and how they try things for real: the
// preflight's host (the /proc paths, the user-namespace probe, cgroups)
// and the probes only doctor makes. Tests replace the paths with a fake
// /proc tree and the probes with functions that fail the way a restricted
// host does; the real host's sysctls are never written by tests.
type host struct {
	*preflight.Host
	// probeUnpriv creates a user and mount namespace as an ordinary user
	// (root only); tried is false when no tool could try it.
	probeUnpriv func(ctx context.Context) (tried bool, err error)
	// probeOverlay mounts an overlay inside a new user namespace.
	probeOverlay func(ctx context.Context) (tried bool, err error)
	// probeIDMap makes an idmapped clone of dir's mount (root only).
	probeIDMap func(ctx context.Context, dir string) error
}

func newHost() *host {
	h := &host{Host: preflight.NewHost(), probeUnpriv: realProbeUnpriv, probeIDMap: realProbeIDMap}
	h.probeOverlay = h.realProbeOverlay
	return h
}

// kernelRelease is uname -r.
func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// kernelAtLeast reports whether release is at least major.minor; ok is
// false when release does not parse.
func kernelAtLeast(release string, major, minor int) (at, ok bool) {
	maj, rest, _ := strings.Cut(release, ".")
	mi := rest
	if i := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		mi = rest[:i]
	}
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(mi)
	if err1 != nil || err2 != nil {
		return false, false
	}
	return a > major || a == major && b >= minor, true
}
