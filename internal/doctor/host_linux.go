package doctor

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"

	"github.com/pinfold/pinfold/internal/cgroup"
	"golang.org/x/sys/unix"
)

// host is where the checks look and how they try things for real. Tests
// replace the paths with a fake /proc tree and the probes with functions
// that fail the way a restricted host does; the real host's sysctls are
// never written by tests.
type host struct {
	procSys string // /proc/sys
	proc    string // /proc
	euid    int

	// probeUserns creates the namespaces the native backend uses, as this
	// process's user, in a child process.
	probeUserns func(ctx context.Context) error
	// probeUnpriv creates a user and mount namespace as an ordinary user
	// (root only); tried is false when no tool could try it.
	probeUnpriv func(ctx context.Context) (tried bool, err error)
	// probeOverlay mounts an overlay inside a new user namespace.
	probeOverlay func(ctx context.Context) (tried bool, err error)
	// probeIDMap makes an idmapped clone of dir's mount (root only).
	probeIDMap func(ctx context.Context, dir string) error
	// cgroups finds the host's cgroup hierarchies.
	cgroups func() (*cgroup.System, error)
	// runDir is the preflight cache directory; "" disables the cache.
	runDir func(euid int) string
}

func newHost() *host {
	h := &host{
		procSys: "/proc/sys",
		proc:    "/proc",
		euid:    unix.Geteuid(),
		cgroups: cgroup.Detect,
		runDir:  defaultRunDir,
	}
	h.probeUserns = h.realProbeUserns
	h.probeUnpriv = realProbeUnpriv
	h.probeOverlay = h.realProbeOverlay
	h.probeIDMap = realProbeIDMap
	return h
}

// defaultRunDir is /run/pinfold for root, $XDG_RUNTIME_DIR/pinfold for
// others, or "" (no cache) when XDG_RUNTIME_DIR is not an absolute path.
func defaultRunDir(euid int) string {
	if euid == 0 {
		return "/run/pinfold"
	}
	d := os.Getenv("XDG_RUNTIME_DIR")
	if len(d) == 0 || d[0] != '/' {
		return ""
	}
	return d + "/pinfold"
}

// readSmall reads a small file (a /proc entry) with one read.
func readSmall(path string) ([]byte, error) {
	return readInto(path, make([]byte, 4096))
}

// readInto reads path with one read into buf. A small buffer matters for
// /proc/sys files, where the kernel allocates the size asked for.
func readInto(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	n, err := unix.Read(fd, buf)
	for err == unix.EINTR {
		n, err = unix.Read(fd, buf)
	}
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// sysctl reads an integer sysctl by its dotted name; ok is false when the
// kernel does not have it.
func (h *host) sysctl(name string) (v int64, ok bool) {
	b, err := readSmall(h.sysctlPath(name))
	if err != nil {
		return 0, false
	}
	v, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v, err == nil
}

func (h *host) sysctlPath(name string) string {
	return h.procSys + "/" + strings.ReplaceAll(name, ".", "/")
}

// Sysctls that decide who may create user namespaces.
const (
	sysMaxUserNS   = "user.max_user_namespaces"
	sysUnprivClone = "kernel.unprivileged_userns_clone"             // Debian and Ubuntu kernels
	sysAppArmor    = "kernel.apparmor_restrict_unprivileged_userns" // Ubuntu 23.10 and later
)

// sysctlChange is a sysctl value that would lift a restriction.
type sysctlChange struct {
	name, value string
	why         string // what the current value does
}

// usernsBlockers lists the sysctls that keep this user (or, with
// ordinary, users without privileges) from creating user namespaces.
// probeErr, the error of a real attempt, tells an exhausted limit apart.
func (h *host) usernsBlockers(ordinary bool, probeErr error) []sysctlChange {
	var ch []sysctlChange
	if v, ok := h.sysctl(sysMaxUserNS); ok && (v == 0 || errors.Is(probeErr, unix.ENOSPC) && v < 15000) {
		why := sysMaxUserNS + " is " + strconv.FormatInt(v, 10)
		if v == 0 {
			why += ": nobody, not even root, may create user namespaces"
		} else {
			why += " and that many user namespaces exist"
		}
		ch = append(ch, sysctlChange{sysMaxUserNS, "15000", why})
	}
	if !ordinary {
		return ch
	}
	if v, ok := h.sysctl(sysUnprivClone); ok && v == 0 {
		ch = append(ch, sysctlChange{sysUnprivClone, "1", sysUnprivClone + " is 0: only root may create user namespaces"})
	}
	if v, ok := h.sysctl(sysAppArmor); ok && v != 0 {
		ch = append(ch, sysctlChange{sysAppArmor, "0", "AppArmor restricts user namespaces of unconfined programs (" + sysAppArmor + " is " + strconv.FormatInt(v, 10) + ")"})
	}
	return ch
}

// sysctlFix is the fix text for changes: the commands, and how to keep
// the values after a reboot.
func sysctlFix(ch []sysctlChange) string {
	var cmd, conf []string
	apparmor := false
	for _, c := range ch {
		cmd = append(cmd, "sysctl -w "+c.name+"="+c.value)
		conf = append(conf, c.name+" = "+c.value)
		apparmor = apparmor || c.name == sysAppArmor
	}
	s := strings.Join(cmd, " && ") + "; to keep it after a reboot: printf '" + strings.Join(conf, "\\n") +
		"\\n' > /etc/sysctl.d/60-pinfold.conf"
	if apparmor {
		s += " (instead of lifting the AppArmor restriction for every program, you may give pinfold an AppArmor profile with the \"userns,\" rule)"
	}
	return s
}

func whys(ch []sysctlChange) string {
	w := make([]string, len(ch))
	for i, c := range ch {
		w[i] = c.why
	}
	return strings.Join(w, "; ")
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
