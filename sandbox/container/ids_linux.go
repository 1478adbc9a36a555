package container

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/internal/store"
)

// A container pinfold runs as root never runs as host root: its ids lie
// in the same unprivileged range a native sandbox's do (store.RootIDBase +
// id, 65,536 ids), so the host's root-only files in the system
// directories it is shown are as unreadable as natively. Podman puts
// the container in a user namespace mapping that range (root inside is
// host id store.RootIDBase); docker has no user namespace per container
// (--userns-remap is the whole daemon's), so its command runs as host id
// store.RootIDBase itself.
//
// The host directories the caller gave (the workspace, a changeset's
// lower directory, mounts) are shown through idmapped mounts that pinfold
// makes, as natively: their owner shows as the sandbox's root, so that
// what the command writes there belongs to the owner on disk.
const sandboxIDs = 65536

// idMountsDir holds the idmapped mounts of running containers, one
// directory per sandbox named after its pinfold process. It is outside
// the store: nothing that removes a store's trees recursively may walk
// into a workspace through them.
var idMountsDir = "/run/pinfold/containers"

// idMounts are one sandbox's idmapped views of host directories, made
// on first use.
type idMounts struct {
	uid, gid uint32 // the owner shown as the sandbox's root
	dir      string
	ns       int // the user namespace whose map the mounts carry
	points   []string
}

// newIDMounts prepares idmapped mounts that show disk id owner as
// store.RootIDBase (the sandbox's root), disk id 0 as store.RootIDBase+owner,
// and every other id i below sandboxIDs as store.RootIDBase+i.
func newIDMounts(uid, gid uint32) *idMounts {
	return &idMounts{uid: uid, gid: gid, ns: -1}
}

// ready makes the mounts' directory and user namespace.
func (m *idMounts) ready() error {
	if m.ns >= 0 {
		return nil
	}
	if m.dir == "" {
		if err := os.MkdirAll(idMountsDir, 0o700); err != nil {
			return err
		}
		dir := filepath.Join(idMountsDir, Owner()+"-"+randomID())
		if err := os.Mkdir(dir, 0o700); err != nil {
			return err
		}
		m.dir = dir
	}
	ns, err := sharedNamespace(swapMap(m.uid), swapMap(m.gid))
	if err != nil {
		return err
	}
	m.ns = ns
	return nil
}

// userNSDir keeps the user namespaces whose maps idmapped mounts carry,
// each bound to a file named after its maps (as ip netns keeps network
// namespaces): making one costs a process started and waited for, a few
// milliseconds of every run, more on a loaded machine. Only root can
// write there; /run goes with the boot.
var userNSDir = "/run/pinfold/userns"

// sharedNamespace returns a file descriptor of a user namespace with the
// given maps: the one userNSDir keeps, else a new one, which it then
// keeps.
func sharedNamespace(uids, gids []syscall.SysProcIDMap) (int, error) {
	p := filepath.Join(userNSDir, mapsName(uids, gids))
	if fd, err := openUserNS(p); err == nil {
		return fd, nil
	}
	fd, err := idmapNamespace(uids, gids)
	if err != nil {
		return -1, err
	}
	keepUserNS(fd, p)
	return fd, nil
}

// mapsName names a user namespace by its maps.
func mapsName(uids, gids []syscall.SysProcIDMap) string {
	h := sha256.New()
	fmt.Fprintf(h, "v1 uid %v gid %v", uids, gids)
	return hex.EncodeToString(h.Sum(nil))[:24]
}

// openUserNS opens the user namespace bound at p: never a plain file (a
// pinfold that has made the file and not yet bound the namespace on it,
// or was killed in between).
func openUserNS(p string) (int, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return -1, err
	}
	if t, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE); err != nil || t != unix.CLONE_NEWUSER {
		unix.Close(fd)
		return -1, fmt.Errorf("%s: not a user namespace", p)
	}
	return fd, nil
}

// keepUserNS binds the user namespace fd to p, for the runs after this
// one. Best effort: where it cannot, they make their own.
func keepUserNS(fd int, p string) {
	if err := os.MkdirAll(userNSDir, 0o700); err != nil {
		return
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		// A file a killed pinfold left before binding: no other
		// pinfold takes seconds between the two.
		if fi, lerr := os.Lstat(p); lerr == nil && fi.Mode().IsRegular() && time.Since(fi.ModTime()) > 10*time.Second {
			if _, oerr := openUserNS(p); oerr != nil && os.Remove(p) == nil {
				f, err = os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			}
		}
	}
	if err != nil {
		return
	}
	f.Close()
	if unix.Mount("/proc/self/fd/"+strconv.Itoa(fd), p, "", unix.MS_BIND, "") != nil {
		os.Remove(p)
	}
}

// swapMap is the user namespace map of an idmapped mount that shows disk
// id owner as the sandbox's root and the other way round: an idmapped
// mount reads disk id d as id d of its namespace, that is host id
// map(d).
func swapMap(owner uint32) []syscall.SysProcIDMap {
	var m []syscall.SysProcIDMap
	add := func(in, out, n uint32) {
		if n > 0 {
			m = append(m, syscall.SysProcIDMap{ContainerID: int(in), HostID: int(out), Size: int(n)})
		}
	}
	if owner == 0 {
		add(0, store.RootIDBase, sandboxIDs)
		return m
	}
	// disk 0 (the sandbox's root by default) is the owner's place now.
	if owner < sandboxIDs {
		add(0, store.RootIDBase+owner, 1)
		add(1, store.RootIDBase+1, owner-1)
		add(owner, store.RootIDBase, 1)
		add(owner+1, store.RootIDBase+owner+1, sandboxIDs-owner-1)
		return m
	}
	add(1, store.RootIDBase+1, sandboxIDs-1) // disk 0 shows as nobody

	add(owner, store.RootIDBase, 1)
	return m
}

// idmapNamespace returns a file descriptor of a new user namespace with
// the given maps, held by a short-lived child.
func idmapNamespace(uids, gids []syscall.SysProcIDMap) (int, error) {
	holder, err := exec.LookPath("cat")
	if err != nil {
		return -1, fmt.Errorf("making idmapped mounts: %w", err)
	}
	cmd := exec.Command(holder)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER, UidMappings: uids, GidMappings: gids,
		Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return -1, err
	}
	if err := cmd.Start(); err != nil {
		in.Close()
		return -1, fmt.Errorf("making the user namespace of idmapped mounts: %w", err)
	}
	ns, err := unix.Open("/proc/"+strconv.Itoa(cmd.Process.Pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	in.Close()
	cmd.Wait()
	if err != nil {
		return -1, fmt.Errorf("making idmapped mounts: %w", err)
	}
	return ns, nil
}

// bind shows src (a directory or a file) idmapped, and returns where.
func (m *idMounts) bind(src string) (string, error) {
	if err := m.ready(); err != nil {
		return "", err
	}
	fi, err := os.Stat(src)
	if err != nil {
		return "", err
	}
	point := filepath.Join(m.dir, strconv.Itoa(len(m.points)))
	if fi.IsDir() {
		err = os.Mkdir(point, 0o700)
	} else {
		err = os.WriteFile(point, nil, 0o600)
	}
	if err != nil {
		return "", err
	}
	tree, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		os.Remove(point)
		return "", &os.PathError{Op: "open_tree", Path: src, Err: err}
	}
	defer unix.Close(tree)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Userns_fd: uint64(m.ns)}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		os.Remove(point)
		if errors.Is(err, unix.EINVAL) {
			return "", fmt.Errorf("%s: its filesystem does not support idmapped mounts, which show it to a container with its owner's ids when pinfold runs as root; run pinfold as the owner of the directory instead: %w", src, err)
		}
		return "", &os.PathError{Op: "mount_setattr", Path: src, Err: err}
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, point, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		os.Remove(point)
		return "", &os.PathError{Op: "move_mount", Path: point, Err: err}
	}
	m.points = append(m.points, point)
	return point, nil
}

// overlay mounts an overlay of lower (an idmapped view) whose writes go
// to upper, and returns where. Podman mounts its own overlays inside the
// container's user namespace, as the sandbox's root, which may not reach
// the store, and docker's daemon mounts its overlay volumes without
// "volatile": this one is mounted by pinfold, for both engines.
func (m *idMounts) overlay(lower, upper, work string) (string, error) {
	if err := m.ready(); err != nil {
		return "", err
	}
	point := filepath.Join(m.dir, strconv.Itoa(len(m.points)))
	if err := os.Mkdir(point, 0o700); err != nil {
		return "", err
	}
	// Volatile, as a native sandbox's changeset: without it the
	// overlay's unmount syncs the whole file system the store is on
	// (some 40 to 70 ms of every gVisor run on a loaded machine). A
	// changeset is not durable before it is applied (apply syncs what it
	// writes). The marker an earlier volatile mount left in a work
	// directory run again would make overlayfs refuse it.
	os.RemoveAll(filepath.Join(work, "work", "incompat", "volatile"))
	opts := "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work + ",volatile"
	if err := unix.Mount("overlay", point, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		os.Remove(point)
		return "", &os.PathError{Op: "mount overlay", Path: lower, Err: err}
	}
	m.points = append(m.points, point)
	return point, nil
}

// release detaches the mounts (containers keep their own binds of them)
// and removes their directory.
func (m *idMounts) release() {
	for _, p := range slices.Backward(m.points) {
		unix.Unmount(p, unix.MNT_DETACH)
		os.Remove(p)
	}
	m.points = nil
	if m.ns >= 0 {
		unix.Close(m.ns)
		m.ns = -1
	}
	if m.dir != "" {
		os.Remove(m.dir)
		m.dir = ""
	}
}

// CleanMounts detaches the idmapped mounts of pinfold processes that are
// gone (killed before their sandbox's end) and returns the directories
// it removed. It never removes anything recursively: a mount it could not
// detach stays, with its directory.
func CleanMounts() ([]string, error) {
	var removed []string
	var errs []error
	for _, dir := range deadMounts() {
		for _, p := range mountPointsUnder(dir) {
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
				errs = append(errs, &os.PathError{Op: "umount", Path: p, Err: err})
			}
		}
		pts, _ := os.ReadDir(dir)
		for _, p := range pts {
			os.Remove(filepath.Join(dir, p.Name()))
		}
		if err := os.Remove(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, dir)
	}
	return removed, errors.Join(errs...)
}

// deadMounts lists the directories of idmapped mounts whose pinfold
// process is gone.
func deadMounts() []string {
	ents, err := os.ReadDir(idMountsDir)
	if err != nil {
		return nil
	}
	var dead []string
	for _, e := range ents {
		owner, _, ok := cutLast(e.Name(), "-")
		if ok && e.IsDir() && !ownerAlive(owner) {
			dead = append(dead, filepath.Join(idMountsDir, e.Name()))
		}
	}
	return dead
}

func cutLast(s, sep string) (string, string, bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// mountPointsUnder lists this mount namespace's mount points below dir,
// the deepest first.
func mountPointsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var ps []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		p := unescapeMount(f[4])
		if strings.HasPrefix(p, dir+"/") {
			ps = append(ps, p)
		}
	}
	slices.SortFunc(ps, func(a, b string) int { return len(b) - len(a) })
	return ps
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// IDMounts are a sandbox's idmapped views of the caller's directories,
// for a runtime other than the container engines that runs as root with
// the sandbox range's ids (sandbox/gvisor). They live beside the
// containers' (idMountsDir), so that pinfold clean's CleanMounts detaches
// those a killed run left.
type IDMounts struct{ m *idMounts }

// SandboxIDs is how many ids a sandbox has from store.RootIDBase on.
const SandboxIDs = sandboxIDs

// NewIDMounts prepares idmapped mounts that show disk ids uid and gid
// (the workspace's owner) as the sandbox's root.
func NewIDMounts(uid, gid uint32) *IDMounts { return &IDMounts{newIDMounts(uid, gid)} }

// Bind shows src idmapped and returns where.
func (m *IDMounts) Bind(src string) (string, error) { return m.m.bind(src) }

// Overlay mounts an overlay of lower (a view Bind returned) whose writes
// go to upper, and returns where.
func (m *IDMounts) Overlay(lower, upper, work string) (string, error) {
	return m.m.overlay(lower, upper, work)
}

// Release detaches the mounts.
func (m *IDMounts) Release() { m.m.release() }
