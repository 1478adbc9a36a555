package native

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	initp "github.com/pinfold/pinfold/internal/backend/native"
	"github.com/pinfold/pinfold/internal/landlock"
)

// Mount attributes (MOUNT_ATTR_* of mount_setattr).
const (
	attrRdonly = 0x1
	attrNosuid = 0x2
	attrNodev  = 0x4
	attrNoexec = 0x8
)

// hostSystemDirs is what the host base shows: system directories only.
var hostSystemDirs = [...]string{"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "opt"}

// HostSystemDirs returns the top-level directories the host base shows
// (those that exist on this host are bound read-only).
func HostSystemDirs() []string { return append([]string(nil), hostSystemDirs[:]...) }

// ownMounts are the paths the sandbox provides itself, whatever the base has.
var ownMounts = [...]string{"/dev", "/proc", "/sys", "/tmp"}

// procReadOnly are /proc paths the command may read but never write.
var procReadOnly = [...]string{"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"}

// procMasked are /proc paths hidden entirely: they describe the host
// kernel's memory, keys and devices.
var procMasked = [...]string{
	"/proc/kcore", "/proc/keys", "/proc/key-users", "/proc/kallsyms", "/proc/timer_list",
	"/proc/sched_debug", "/proc/latency_stats", "/proc/acpi", "/proc/scsi", "/proc/asound",
	"/proc/pagetypeinfo", "/proc/sysvipc",
}

// hostDevices are bound from the host into the sandbox's /dev.
var hostDevices = [...]string{"null", "zero", "full", "random", "urandom", "tty"}

// layout collects the operations that build a root.
type layout struct {
	ops  []initp.Op
	made map[string]bool // directories created in the new root
	// clone has host sources cloned by the init's first stage, which runs
	// with the host's ids: as root, the sandbox's own ids may not be able
	// to traverse a source's parents (pinfold's store is 0700).
	clone bool
	// rules are the Landlock layer's grants: what the plan exposes is
	// readable, what it lets the command write writable, nothing else.
	rules []initp.LandlockRule
}

// testLandlock is set by tests only: paths shown but not granted (skip),
// or granted read-only whatever their mount (readOnly), to show that the
// Landlock layer denies on its own.
var testLandlock struct{ skip, readOnly map[string]bool }

// grant lets the command have access beneath path.
func (l *layout) grant(path string, access uint64) {
	if testLandlock.skip[path] {
		return
	}
	if testLandlock.readOnly[path] {
		access &= landlock.Read
	}
	l.rules = append(l.rules, initp.LandlockRule{Path: path, Access: access})
}

// hostBind binds the host path src at dst.
func (l *layout) hostBind(src, dst string, attr uint64, what string) {
	if l.clone {
		l.add(initp.Op{Kind: initp.OpIDMap, Flags: initp.OpNoIDMap, A: src, B: dst, Attr: attr, What: what})
		return
	}
	l.add(initp.Op{Kind: initp.OpBind, Flags: initp.OpHostSource, A: src, B: dst,
		MountFlags: syscall.MS_REC, Attr: attr, What: what})
}

func (l *layout) add(op initp.Op) { l.ops = append(l.ops, op) }

// mkdirAll creates dir and its missing parents in the new root.
func (l *layout) mkdirAll(dir string, mode uint32) {
	if dir == "/" || l.made[dir] {
		return
	}
	l.mkdirAll(filepath.Dir(dir), 0o755)
	l.made[dir] = true
	l.add(initp.Op{Kind: initp.OpMkdir, B: dir, Mode: mode})
}

// under reports whether p is dir or inside it.
func under(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// placeBase lays out one entry of the base (host path src, shown at dst).
// Entries that hold a mount point are recreated as directories and their
// children placed one by one, so mount points can be made inside what is
// otherwise a read-only bind.
func (l *layout) placeBase(src, dst string, points []string) {
	fi, err := os.Lstat(src)
	if err != nil {
		return
	}
	holds, is := false, false
	for _, p := range points {
		if p == dst {
			is = true
		} else if under(p, dst) {
			holds = true
		}
	}
	mode := uint32(fi.Mode().Perm())
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		if holds || is {
			l.mkdirAll(dst, 0o755)
			return
		}
		target, err := os.Readlink(src)
		if err != nil {
			return
		}
		l.add(initp.Op{Kind: initp.OpSymlink, A: target, B: dst})
	case fi.IsDir():
		l.made[dst] = true
		l.add(initp.Op{Kind: initp.OpMkdir, B: dst, Mode: mode})
		if is {
			return
		}
		if !holds {
			l.hostBind(src, dst, attrRdonly|attrNosuid|attrNodev, "mounting "+src+" from the base")
			l.grant(dst, landlock.Read)
			return
		}
		entries, err := os.ReadDir(src)
		if err != nil {
			return
		}
		for _, e := range entries {
			l.placeBase(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()), points)
		}
	case fi.Mode().IsRegular():
		l.add(initp.Op{Kind: initp.OpMkfile, B: dst, Mode: mode})
		if !is {
			l.hostBind(src, dst, attrRdonly|attrNosuid|attrNodev, "mounting "+src+" from the base")
			l.grant(dst, landlock.Read)
		}
	}
	// Sockets, fifos and devices of the base are never shown.
}

// baseEntries lists the top-level entries of the base's root directory.
func baseEntries(root string, host bool) []string {
	if host {
		return hostSystemDirs[:]
	}
	if root == "" {
		return nil // an app's mounted root image
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// bind is one host path shown inside (the workspace or a Mount).
type bind struct {
	src, dst string
	ro       bool
	file     bool
}

// overlay shows a host directory (at its own path) through overlayfs, with
// writes going to upper.
type overlay struct {
	lower, upper, work string
	target             string // where inside; default lower
	base               bool   // lower is a base directory: cloned without idmapping
}

// rootPlan is what buildRoot needs beyond the Spec.
type rootPlan struct {
	baseRoot string // host directory holding the base
	hostBase bool
	binds    []bind // sorted, parents first
	overlays []overlay
	idmap    bool // binds are idmapped (root supervisors)
	tmpSize  int64
	scratch  string // host directory for /tmp instead of a tmpfs
	// rootDir is the init's scratch directory (Config.Scratch), which the
	// new root is mounted on; scratchDir() when not set.
	rootDir  string
	hideExe  string    // the host's pinfold binary, when the base shows it
	hide     []string  // directories inside shown empty (pinfold's store)
	resolver bool      // /etc/resolv.conf names pinfold's DNS server
	app      *appMount // the base is an app's root image, mounted (baseRoot is "")
}

// resolvConf is the sandbox's /etc/resolv.conf with pinfold's stack.
const resolvConf = "# pinfold: names resolve through pinfold's DNS server, which applies the\n" +
	"# network policy (see docs/network.md).\nnameserver 10.0.2.3\noptions edns0\n"

// buildRoot returns the operations that build the sandbox's root and the
// Landlock rules that grant what it shows.
func buildRoot(p *rootPlan) ([]initp.Op, []initp.LandlockRule) {
	l := &layout{made: map[string]bool{"/": true}, ops: make([]initp.Op, 0, 64), clone: p.idmap}
	// Listing directories is granted everywhere (the root's own
	// directories hold mount points); reading files only where granted.
	l.grant("/", landlock.ReadDir)
	points := make([]string, 0, len(ownMounts)+len(p.binds))
	points = append(points, ownMounts[:]...)
	for _, b := range p.binds {
		points = append(points, b.dst)
	}
	for _, o := range p.overlays {
		points = append(points, o.at())
	}
	if p.app != nil {
		l.mountApp(p.app)
	}
	for _, name := range baseEntries(p.baseRoot, p.hostBase) {
		dst := "/" + name
		if !p.hostBase && isOwnMount(dst) {
			continue
		}
		l.placeBase(filepath.Join(p.baseRoot, name), dst, points)
	}
	// On the host base /var/tmp is the sandbox's /tmp: a symbolic link,
	// or, when a workspace or mount goes at or below /var/tmp (a mount
	// point through the link would land in /tmp), /tmp bound there below.
	varTmpPoint := false
	for _, pt := range points {
		varTmpPoint = varTmpPoint || under(pt, "/var/tmp")
	}
	if p.hostBase && !l.made["/var"] {
		l.mkdirAll("/var", 0o755)
		if varTmpPoint {
			l.mkdirAll("/var/tmp", 0o1777)
		} else {
			l.add(initp.Op{Kind: initp.OpSymlink, A: "../tmp", B: "/var/tmp"})
		}
	}

	// /dev: a small tmpfs with the host's harmless devices bound in, its own
	// devpts instance and /dev/shm, read-only once built.
	l.mkdirAll("/dev", 0o755)
	l.add(initp.Op{Kind: initp.OpMount, A: "tmpfs", B: "/dev", C: "tmpfs", D: "mode=0755,size=64k",
		MountFlags: syscall.MS_NOSUID | syscall.MS_NOEXEC, What: "mounting /dev"})
	for _, d := range hostDevices {
		// Device nodes need no nosuid or noexec: neither applies to them.
		l.add(initp.Op{Kind: initp.OpMkfile, B: "/dev/" + d, Mode: 0o666})
		l.hostBind("/dev/"+d, "/dev/"+d, 0, "binding /dev/"+d)
	}
	l.add(initp.Op{Kind: initp.OpMkdir, B: "/dev/pts", Mode: 0o755})
	l.add(initp.Op{Kind: initp.OpMount, A: "devpts", B: "/dev/pts", C: "devpts", D: "newinstance,ptmxmode=0666,mode=0620",
		MountFlags: syscall.MS_NOSUID | syscall.MS_NOEXEC, What: "mounting /dev/pts"})
	l.add(initp.Op{Kind: initp.OpSymlink, A: "pts/ptmx", B: "/dev/ptmx"})
	l.add(initp.Op{Kind: initp.OpMkdir, B: "/dev/shm", Mode: 0o1777})
	l.add(initp.Op{Kind: initp.OpMount, A: "tmpfs", B: "/dev/shm", C: "tmpfs", D: "mode=1777,size=64m",
		MountFlags: syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC, What: "mounting /dev/shm"})
	for i, name := range [...]string{"stdin", "stdout", "stderr"} {
		l.add(initp.Op{Kind: initp.OpSymlink, A: "/proc/self/fd/" + strconv.Itoa(i), B: "/dev/" + name})
	}
	l.add(initp.Op{Kind: initp.OpSymlink, A: "/proc/self/fd", B: "/dev/fd"})
	// /dev is read-only but for its devices and /dev/shm, which the
	// command writes (and whose ioctls, a terminal's, it makes).
	l.grant("/dev", landlock.Read|landlock.Write)

	// /proc of the sandbox's own pid namespace, with the host kernel's
	// sensitive files hidden and its tunables read-only.
	l.mkdirAll("/proc", 0o555)
	l.add(initp.Op{Kind: initp.OpMount, A: "proc", B: "/proc", C: "proc",
		MountFlags: syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC, What: "mounting /proc"})
	for _, path := range procReadOnly {
		l.add(initp.Op{Kind: initp.OpBind, Flags: initp.OpOptional, A: path, B: path,
			MountFlags: syscall.MS_REC, Attr: attrRdonly | attrNosuid | attrNodev | attrNoexec,
			What: "making " + path + " read-only"})
	}
	for _, path := range procMasked {
		l.add(initp.Op{Kind: initp.OpMask, B: path, What: "hiding " + path})
	}
	l.grant("/proc", landlock.Read|landlock.WriteFile|landlock.Truncate)

	l.mkdirAll("/tmp", 0o1777)
	switch {
	case p.scratch == "":
		l.add(initp.Op{Kind: initp.OpMount, A: "tmpfs", B: "/tmp", C: "tmpfs",
			D:          "mode=1777,size=" + strconv.FormatInt(p.tmpSize, 10),
			MountFlags: syscall.MS_NOSUID | syscall.MS_NODEV, What: "mounting /tmp"})
	case p.idmap:
		// Cloned as the host sees it, like a changeset's upper directory.
		l.add(initp.Op{Kind: initp.OpIDMap, Flags: initp.OpNoIDMap, A: p.scratch, B: "/tmp",
			Attr: attrNosuid | attrNodev, What: "mounting " + p.scratch + " at /tmp"})
	default:
		l.hostBind(p.scratch, "/tmp", attrNosuid|attrNodev, "mounting "+p.scratch+" at /tmp")
	}
	l.grant("/tmp", landlock.Read|landlock.Write)
	if p.hostBase && varTmpPoint {
		l.add(initp.Op{Kind: initp.OpBind, A: "/tmp", B: "/var/tmp", Attr: attrNosuid | attrNodev,
			What: "showing /tmp at /var/tmp"})
	}
	l.mkdirAll("/sys", 0o555) // empty: nothing of the host's /sys is shown
	if p.app != nil {
		l.placeApp(p.app, points)
	}

	for _, b := range p.binds {
		if b.file {
			l.mkdirAll(filepath.Dir(b.dst), 0o755)
			l.add(initp.Op{Kind: initp.OpMkfile, B: b.dst, Mode: 0o644})
		} else {
			l.mkdirAll(b.dst, 0o755)
		}
		attr := uint64(attrNosuid | attrNodev)
		if b.ro {
			attr |= attrRdonly
		}
		what := "mounting " + b.src + " at " + b.dst
		if b.ro {
			l.grant(b.dst, landlock.Read)
		} else {
			l.grant(b.dst, landlock.Read|landlock.Write)
		}
		if p.idmap {
			l.add(initp.Op{Kind: initp.OpIDMap, A: b.src, B: b.dst, Attr: attr, What: what})
		} else {
			l.hostBind(b.src, b.dst, attr, what)
		}
	}
	l.overlays(p)
	if p.resolver {
		l.resolvConf(p)
	}
	if p.hideExe != "" {
		l.add(initp.Op{Kind: initp.OpMask, B: p.hideExe, What: "hiding the pinfold binary"})
	}
	for _, h := range p.hide {
		l.add(initp.Op{Kind: initp.OpMask, B: h, What: "hiding pinfold's store at " + h})
	}
	l.add(initp.Op{Kind: initp.OpSetattr, B: "/dev", Attr: attrRdonly, What: "making /dev read-only"})
	return l.ops, l.rules
}

// resolvConf shows resolvConf at the base's /etc/resolv.conf: bound over
// the file, or written where its symbolic link points when that is in the
// sandbox's own staging root (systemd-resolved's /run/...). Without either
// there is nowhere to put it and the command resolves with what the base has.
func (l *layout) resolvConf(p *rootPlan) {
	const src = "/dev/.pinfold-resolv.conf"
	target := "/etc/resolv.conf"
	fi, err := os.Lstat(filepath.Join(p.baseRoot, target))
	if err == nil && fi.Mode()&os.ModeSymlink != 0 {
		link, err := os.Readlink(filepath.Join(p.baseRoot, target))
		if err != nil {
			return
		}
		if !filepath.IsAbs(link) {
			link = filepath.Join("/etc", link)
		}
		link = filepath.Clean(link)
		top := "/" + strings.SplitN(link[1:], "/", 2)[0]
		if !l.madeOrFree(top, p) {
			return
		}
		l.mkdirAll(filepath.Dir(link), 0o755)
		l.add(initp.Op{Kind: initp.OpMkfile, A: resolvConf, B: link, Mode: 0o644})
		l.grant(link, landlock.ReadFile)
		return
	}
	if err != nil || !fi.Mode().IsRegular() {
		return
	}
	l.add(initp.Op{Kind: initp.OpMkfile, A: resolvConf, B: src, Mode: 0o644})
	l.add(initp.Op{Kind: initp.OpBind, A: src, B: target, Attr: attrRdonly | attrNosuid | attrNodev,
		What: "showing pinfold's resolver at /etc/resolv.conf"})
}

// madeOrFree reports whether top is a directory of the staging root that no
// base entry or mount occupies.
func (l *layout) madeOrFree(top string, p *rootPlan) bool {
	for _, name := range baseEntries(p.baseRoot, p.hostBase) {
		if "/"+name == top {
			return false
		}
	}
	return !isOwnMount(top)
}

func isOwnMount(p string) bool {
	for _, m := range ownMounts {
		if p == m {
			return true
		}
	}
	return false
}

// sortBinds orders binds so that a mount point's parents are mounted first.
func sortBinds(b []bind) {
	sort.SliceStable(b, func(i, j int) bool {
		return strings.Count(b[i].dst, "/") < strings.Count(b[j].dst, "/")
	})
}

// stageTmpfs is where the init attaches the layers of overlays before
// mounting them: the sandbox's own ids may not reach the host paths, so
// the init's first stage clones them as the host sees them. It is a small
// tmpfs over the scratch directory of the old root (a directory there for
// certain: the new root was mounted on it), so that the old root's one
// detach takes the layers with it. Each unmount waits for an RCU grace
// period, the slowest step of a changeset run on a busy machine; a stage
// in the new root cost two more.
func (p *rootPlan) stageTmpfs() string {
	if p.rootDir == "" {
		return "/.old" + scratchDir()
	}
	return "/.old" + p.rootDir
}

// overlays mounts the overlays of p at their own paths.
func (l *layout) overlays(p *rootPlan) {
	if len(p.overlays) == 0 {
		return
	}
	stage := p.stageTmpfs()
	if l.clone {
		// Mounted before anything is made under it: the directories
		// below are the tmpfs's, never the host's.
		// Two directories an overlay, and the root's inode.
		inodes := strconv.Itoa(2*len(p.overlays) + 8)
		l.add(initp.Op{Kind: initp.OpMount, A: "tmpfs", B: stage, C: "tmpfs", D: "mode=0700,size=16k,nr_inodes=" + inodes,
			MountFlags: syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC, What: "staging the overlays"})
	}
	for i, o := range p.overlays {
		lower, upper, work := "/.old"+o.lower, "/.old"+o.upper, "/.old"+o.work
		if l.clone {
			n := strconv.Itoa(i)
			lowerAt, upperAt := stage+"/l"+n, stage+"/u"+n
			l.add(initp.Op{Kind: initp.OpMkdir, B: lowerAt, Mode: 0o700})
			l.add(initp.Op{Kind: initp.OpMkdir, B: upperAt, Mode: 0o700})
			// The workspace keeps its owner's ids (idmapped), a base its
			// own; the upper directory's parent is cloned as it is.
			var flags uint32
			if o.base {
				flags = initp.OpNoIDMap
			}
			l.add(initp.Op{Kind: initp.OpIDMap, Flags: flags, A: o.lower, B: lowerAt, What: "capturing " + o.lower})
			l.add(initp.Op{Kind: initp.OpIDMap, Flags: initp.OpNoIDMap, A: filepath.Dir(o.upper), B: upperAt,
				What: "attaching the changeset of " + o.lower})
			lower, upper, work = lowerAt, upperAt+"/"+filepath.Base(o.upper), upperAt+"/"+filepath.Base(o.work)
		}
		l.mkdirAll(o.at(), 0o755)
		opts := "lowerdir=" + overlayPath(lower) + ",upperdir=" + overlayPath(upper) + ",workdir=" +
			overlayPath(work) + ",userxattr"
		if !o.base {
			// A changeset's writes are not synced when the overlay goes:
			// without "volatile" its unmount syncs the whole file system
			// the store is on (0.2 s after an untar of 10,000 files). A
			// changeset was never durable before it is applied (apply
			// syncs what it writes); see reuseWork for reruns.
			opts += ",volatile"
		}
		l.add(initp.Op{Kind: initp.OpMount, A: "overlay", B: o.at(), C: "overlay", D: opts,
			MountFlags: syscall.MS_NOSUID | syscall.MS_NODEV, What: "capturing the writes to " + o.lower})
		l.grant(o.at(), landlock.Read|landlock.Write)
	}
}

// reuseWork lets a volatile overlay be mounted again on work, a work
// directory an earlier run used (a changeset run again with --changeset):
// overlayfs refuses a work directory that still holds the marker its last
// volatile mount left, which says that the upper directory was not synced.
// pinfold never relied on that sync, so the marker goes.
func reuseWork(work string) error {
	return os.RemoveAll(filepath.Join(work, "work", "incompat", "volatile"))
}

// overlayPath escapes a path for overlayfs's mount options.
func (o *overlay) at() string {
	if o.target != "" {
		return o.target
	}
	return o.lower
}

func overlayPath(p string) string {
	return strings.NewReplacer(`\`, `\\`, ",", `\,`, ":", `\:`).Replace(p)
}
