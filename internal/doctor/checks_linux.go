package doctor

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"

	"github.com/pinfold/pinfold/internal/cgroup"
	"github.com/pinfold/pinfold/internal/landlock"
	"github.com/pinfold/pinfold/internal/preflight"
	"golang.org/x/sys/unix"
)

// Run runs the checks opt selects and returns them in a fixed order.
// Independent groups of checks run concurrently; each check is bounded in
// time, so Run returns within about 15 seconds even when podman hangs.
func Run(ctx context.Context, opt Options) *Report {
	h := opt.host
	if h == nil {
		h = newHost()
	}
	groups := []func() []Check{
		func() []Check { return h.usernsChecks(ctx) },
		func() []Check { return []Check{h.overlayCheck(ctx)} },
		func() []Check {
			cs := []Check{h.seccompCheck()}
			cs = append(cs, h.cgroupChecks()...)
			return append(cs, landlockCheck())
		},
		func() []Check { return append(h.storeChecks(opt.StoreDir), h.basesCheck(opt.StoreDir)) },
		func() []Check {
			return []Check{signaturesCheck(), netHelperCheck(), packHelperCheck(), appMountCheck()}
		},
		func() []Check { return []Check{gvisorCheck(ctx)} },
	}
	if opt.Workspace != "" {
		groups = append(groups, func() []Check { return []Check{h.idmapCheck(ctx, opt.Workspace)} })
	}
	if opt.Slow {
		groups = append(groups,
			func() []Check { return toolChecks(ctx, "podman") },
			func() []Check { return toolChecks(ctx, "docker") })
	}
	results := make([][]Check, len(groups))
	done := make(chan struct{}, len(groups))
	for i, g := range groups {
		go func() {
			results[i] = g()
			done <- struct{}{}
		}()
	}
	for range groups {
		<-done
	}
	r := &Report{Kernel: kernelRelease(), UID: h.EUID}
	for _, cs := range results {
		for _, c := range cs {
			c.host = h
			if c.Status == Pass {
				c.Fix, c.Fixable = "", false
			}
			r.Checks = append(r.Checks, c)
		}
	}
	return r
}

// usernsChecks are "userns" and "userns.unprivileged".
func (h *host) usernsChecks(ctx context.Context) []Check {
	own := fromPreflight(h.UsernsCheck(ctx))
	c := Check{ID: "userns.unprivileged", Title: "user namespaces for ordinary users"}
	if h.EUID != 0 {
		// This process is the ordinary user: "userns" tried it.
		c.Status, c.Fix, c.Fixable = own.Status, own.Fix, own.Fixable
		c.Detail = "pinfold runs as " + h.AsWho() + ", so the user namespaces check tried this"
		return []Check{own, c}
	}
	tried, err := h.probeUnpriv(ctx)
	ch := h.Blockers(true, err)
	switch {
	case tried && err == nil:
		c.Status = Pass
		c.Detail = "uid 65534 created a user and mount namespace (unshare --user --map-root-user --mount)"
	case tried:
		c.Status = Warn
		c.Detail = "uid 65534 could not create a user namespace: " + err.Error()
		if len(ch) > 0 {
			c.Detail += " (" + preflight.Whys(ch) + ")"
		}
	case len(ch) > 0:
		c.Status = Warn
		c.Detail = preflight.Whys(ch) + " (not tried: unshare(1) not found)"
	default:
		c.Status = Pass
		c.Detail = "no sysctl forbids it (not tried: unshare(1) not found)"
	}
	if c.Status != Pass {
		c.Detail += "; pinfold works as root, but ordinary users cannot run sandboxes"
		if len(ch) > 0 {
			c.Fix, c.Fixable = preflight.SysctlFix(ch), true
		} else {
			c.Fix = "no sysctl forbids it, so something else does (an LSM policy such as AppArmor or SELinux, or a container runtime's seccomp profile)"
		}
	}
	return []Check{own, c}
}

// overlayCheck mounts an overlay in a new user namespace, for real when the
// host has sh(1) and mount(8), else judged by the kernel version and
// /proc/filesystems. Only later releases use overlays (changesets), so
// this check warns but never fails.
func (h *host) overlayCheck(ctx context.Context) Check {
	c := Check{ID: "overlay.userns", Title: "overlayfs in a user namespace"}
	rel := kernelRelease()
	recent, known := kernelAtLeast(rel, 5, 11)
	fs, _ := os.ReadFile(h.Proc + "/filesystems")
	listed := strings.Contains(string(fs), "\toverlay\n")
	tried, err := h.probeOverlay(ctx)
	switch {
	case tried && err == nil:
		c.Status = Pass
		c.Detail = "mounted an overlay in a new user namespace and wrote through it"
		return c
	case tried:
		c.Status = Warn
		c.Detail = "mounting an overlay in a user namespace failed: " + err.Error()
	case !listed && known && recent:
		c.Status = Warn
		c.Detail = "not tried (sh or mount(8) not found); overlay is not in /proc/filesystems (a module not loaded yet?)"
	case known && recent:
		c.Status = Warn
		c.Detail = "not tried (sh or mount(8) not found); kernel " + rel + " supports overlays in user namespaces"
		c.Fix = "install util-linux's mount(8) so pinfold doctor can try it"
		return c
	default:
		c.Status = Warn
		c.Detail = "not tried (sh or mount(8) not found); kernel " + rel
	}
	c.Detail += "; pinfold does not need overlays yet (later releases keep changesets in them)"
	switch {
	case known && !recent:
		c.Fix = "use Linux 5.11 or later, which allows overlay mounts in user namespaces"
	case !listed:
		c.Fix = "load the overlay module (modprobe overlay) or use a kernel built with CONFIG_OVERLAY_FS"
	default:
		c.Fix = "the kernel refused it: check that the overlay module is allowed in user namespaces and that /tmp is on a file system overlayfs accepts as an upper layer"
	}
	return c
}

// seccompCheck looks for seccomp filter support with SECCOMP_RET_ERRNO,
// which pinfold's filter returns for refused system calls.
func (h *host) seccompCheck() Check {
	c := Check{ID: "seccomp", Title: "seccomp filters"}
	status, _ := preflight.ReadSmall(h.Proc + "/self/status")
	mode := ""
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Seccomp:"); ok {
			mode = strings.TrimSpace(v)
		}
	}
	if mode == "" {
		c.Status = Fail
		c.Detail = "no Seccomp line in /proc/self/status: the kernel has no seccomp"
		c.Fix = "use a kernel built with CONFIG_SECCOMP and CONFIG_SECCOMP_FILTER"
		return c
	}
	actions, err := preflight.ReadSmall(h.ProcSys + "/kernel/seccomp/actions_avail")
	if err != nil {
		c.Status = Fail
		c.Detail = "cannot read " + h.ProcSys + "/kernel/seccomp/actions_avail (" + err.Error() + "): the kernel has no seccomp filters"
		c.Fix = "use a kernel built with CONFIG_SECCOMP_FILTER"
		return c
	}
	if !hasWord(string(actions), "errno") {
		c.Status = Fail
		c.Detail = "the kernel's seccomp actions (" + strings.TrimSpace(string(actions)) + ") lack errno"
		c.Fix = "use a kernel whose seccomp supports SECCOMP_RET_ERRNO (any Linux since 3.5)"
		return c
	}
	c.Status = Pass
	c.Detail = "filters with errno available"
	switch mode {
	case "2":
		c.Detail += "; pinfold itself already runs under a filter (a container?): the sandbox's filter stacks on it"
	case "1":
		c.Status = Fail
		c.Detail = "pinfold runs in strict seccomp mode, which allows no new filter"
		c.Fix = "run pinfold outside the strict-mode seccomp sandbox"
	}
	return c
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// cgroupChecks are "cgroup.version", "cgroup.controllers" and
// "cgroup.delegation". Limits are optional, so only a host where no
// limit can be enforced at all, by anyone, fails.
func (h *host) cgroupChecks() []Check {
	ver := Check{ID: "cgroup.version", Title: "cgroup version"}
	ctl := Check{ID: "cgroup.controllers", Title: "cgroup controllers"}
	del := Check{ID: "cgroup.delegation", Title: "cgroup delegation"}
	sys, err := h.Cgroups()
	if err != nil {
		ver.Status, ver.Detail = Warn, err.Error()
		ver.Fix = "mount cgroup2 at /sys/fs/cgroup (systemd does), or the memory, pids and cpu v1 hierarchies"
		ctl.Status, ctl.Detail = Fail, "no cgroup hierarchy found: --memory, --pids and --cpus cannot be used"
		ctl.Fix = ver.Fix
		del.Status, del.Detail = Warn, "not checked: no cgroups"
		return []Check{ver, ctl, del}
	}
	v := sys.Version()
	ver = versionCheck(ver, v)
	ok, bad, joined := usableControllers(sys)
	if h.EUID == 0 {
		del.Status = Pass
		del.Detail = "not needed: pinfold runs as root and makes its cgroups itself"
		switch {
		case len(bad) == 0:
			ctl.Status = Pass
			ctl.Detail = "memory, pids and cpu usable (" + v + ")"
		case len(ok) == 0:
			ctl.Status = Fail
			ctl.Detail = "no controller usable: --memory, --pids and --cpus cannot be used: " + preflight.OneLine(joined)
		default:
			ctl.Status = Warn
			ctl.Detail = "usable: " + strings.Join(ok, ", ") + "; not usable: " + strings.Join(bad, ", ") + ": " + preflight.OneLine(joined)
		}
		if ctl.Status != Pass {
			ctl.Fix = "mount the missing controllers (cgroup v1 hierarchies, or enabled in the cgroup2 root's cgroup.subtree_control), " +
				"and remove any cgroup_disable= from the kernel command line"
		}
		return []Check{ver, ctl, del}
	}

	// An ordinary user: whether the kernel has the controllers, and
	// whether this user may use them, are separate questions.
	enabled := h.enabledControllers()
	switch {
	case v == "none":
		ctl.Status = Fail
		ctl.Detail = "no memory, pids or cpu controller is mounted: limits cannot be enforced on this host"
		ctl.Fix = ver.Fix
	case len(enabled) == 3 || len(enabled) == 0: // 0: /proc/cgroups unreadable
		ctl.Status = Pass
		ctl.Detail = "memory, pids and cpu present (" + v + ")"
	default:
		ctl.Status = Warn
		ctl.Detail = "only " + strings.Join(enabled, ", ") + " enabled in " + h.Proc + "/cgroups"
		ctl.Fix = "remove any cgroup_disable= from the kernel command line"
	}
	switch {
	case len(bad) == 0:
		del.Status = Pass
		del.Detail = "memory, pids and cpu can be limited as " + h.AsWho()
	case v == "none":
		del.Status = Warn
		del.Detail = "not checked: no controllers"
	default:
		del.Status = Warn
		del.Detail = "limits cannot be enforced as " + h.AsWho() + ": " + preflight.OneLine(joined)
		if v == "v1" {
			del.Fix = "run pinfold as root: cgroup v1 hierarchies are not delegated to ordinary users"
		} else {
			del.Fix = "run pinfold in a delegated cgroup: systemd-run --user --scope pinfold run ... (or drop --memory, --pids and --cpus)"
		}
	}
	return []Check{ver, ctl, del}
}

// versionCheck says which cgroup version v is.
func versionCheck(ver Check, v string) Check {
	ver.Status = Pass
	switch v {
	case "v1":
		ver.Detail = "v1: memory, pids and cpu are on cgroup v1 hierarchies"
	case "v2":
		ver.Detail = "v2: memory, pids and cpu are in the unified cgroup2 tree"
	case "hybrid":
		ver.Detail = "hybrid: some controllers on cgroup v1 hierarchies, some in the cgroup2 tree"
	default:
		ver.Status = Warn
		ver.Detail = "none: no memory, pids or cpu controller is mounted"
		ver.Fix = "mount cgroup2 at /sys/fs/cgroup (systemd does), or the memory, pids and cpu v1 hierarchies"
	}
	return ver
}

// usableControllers tries each of memory, pids and cpu as this process:
// those it can limit, those it cannot, and why not.
func usableControllers(sys *cgroup.System) (ok, bad []string, why error) {
	var errs []error
	for _, o := range [...]struct {
		name string
		l    cgroup.Limits
	}{
		{"memory", cgroup.Limits{MemoryBytes: preflight.AllLimits.MemoryBytes}},
		{"pids", cgroup.Limits{Pids: preflight.AllLimits.Pids}},
		{"cpu", cgroup.Limits{CPUs: preflight.AllLimits.CPUs}},
	} {
		if err := sys.Supports(o.l); err != nil {
			bad = append(bad, o.name)
			errs = append(errs, err)
		} else {
			ok = append(ok, o.name)
		}
	}
	return ok, bad, errors.Join(errs...)
}

// enabledControllers lists which of memory, pids and cpu /proc/cgroups
// shows as enabled.
func (h *host) enabledControllers() []string {
	b, err := os.ReadFile(h.Proc + "/cgroups")
	if err != nil {
		return nil
	}
	var on []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 4 && f[3] == "1" && (f[0] == "memory" || f[0] == "pids" || f[0] == "cpu") {
			on = append(on, f[0])
		}
	}
	return on
}

// landlockCheck asks the kernel for its Landlock ABI version: the native
// runtime's second layer (see docs/security.md), used where it is there.
func landlockCheck() Check {
	c := Check{ID: "landlock", Title: "Landlock"}
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno == 0 {
		c.Status = Pass
		c.Detail = "ABI version " + strconv.Itoa(int(v)) + "; native sandboxes' layers: " + strings.Join(landlock.Layers(), ", ")
		if int(v) < landlock.MinABI {
			c.Status = Warn
			c.Fix = "a kernel of Linux 5.19 or later (Landlock ABI 2) for a second layer under the native runtime"
		} else if int(v) < 4 {
			c.Detail += " (TCP rules need ABI 4: network none relies on its empty namespace alone)"
		}
		if landlock.Disabled() {
			c.Status = Warn
			c.Fix = "unset " + landlock.Env + " to have sandboxes use Landlock"
		}
		return c
	}
	c.Status = Warn
	switch errno {
	case unix.ENOSYS:
		c.Detail = "not available: the kernel has no Landlock (Linux 5.13 or later with CONFIG_SECURITY_LANDLOCK)"
	case unix.EOPNOTSUPP:
		c.Detail = "not available: Landlock is built in but not enabled"
	default:
		c.Detail = "not available: " + errno.Error()
	}
	c.Detail += "; native sandboxes run with namespaces and seccomp only"
	c.Fix = "for a second layer under the native runtime: a kernel with CONFIG_SECURITY_LANDLOCK=y and landlock in the lsm= boot parameter"
	return c
}

// idmapCheck tries an idmapped mount of the workspace, which a root
// supervisor makes so that files the command writes belong to the
// workspace's owner.
func (h *host) idmapCheck(ctx context.Context, ws string) Check {
	c := Check{ID: "idmap.workspace", Title: "idmapped mounts on the workspace"}
	if h.EUID != 0 {
		c.Status = Pass
		c.Detail = "not needed: pinfold idmaps the workspace only when it runs as root"
		return c
	}
	err := h.probeIDMap(ctx, ws)
	switch {
	case err == nil:
		c.Status = Pass
		c.Detail = "the file system of " + ws + " supports idmapped mounts"
	case errors.Is(err, unix.EINVAL):
		c.Status = Fail
		c.Detail = "the file system of " + ws + " does not support idmapped mounts: pinfold run there as root fails (PF141)"
		c.Fix = "run pinfold as the owner of " + ws + " instead of root, or keep the workspace on a file system with idmapped mounts (ext4, xfs, btrfs, tmpfs)"
	default:
		c.Status = Warn
		c.Detail = "could not try: " + err.Error()
		c.Fix = "check that " + ws + " exists and is a directory"
	}
	return c
}
