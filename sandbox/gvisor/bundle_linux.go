package gvisor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/internal/netpolicy"
	"github.com/pinfold/pinfold/internal/store"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/container"
)

// The parts of an OCI runtime configuration runsc reads that pinfold
// sets (the runtime-spec's names and layout).
type ociSpec struct {
	Version  string     `json:"ociVersion"`
	Process  ociProcess `json:"process"`
	Root     ociRoot    `json:"root"`
	Hostname string     `json:"hostname,omitempty"`
	Mounts   []ociMount `json:"mounts"`
	Linux    ociLinux   `json:"linux"`
}

type ociProcess struct {
	User         ociUser     `json:"user"`
	Args         []string    `json:"args"`
	Env          []string    `json:"env"`
	Cwd          string      `json:"cwd"`
	NoNewPrivs   bool        `json:"noNewPrivileges"`
	Capabilities ociCaps     `json:"capabilities"`
	Terminal     bool        `json:"terminal,omitempty"`
	ConsoleSize  *ociSize    `json:"consoleSize,omitempty"`
	Rlimits      []ociRlimit `json:"rlimits,omitempty"`
}

type ociRlimit struct {
	Type string `json:"type"`
	Hard uint64 `json:"hard"`
	Soft uint64 `json:"soft"`
}

type ociSize struct {
	Height uint16 `json:"height"`
	Width  uint16 `json:"width"`
}

type ociUser struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// ociCaps are empty sets: the command has no capability.
type ociCaps struct {
	Bounding    []string `json:"bounding"`
	Effective   []string `json:"effective"`
	Inheritable []string `json:"inheritable"`
	Permitted   []string `json:"permitted"`
	Ambient     []string `json:"ambient"`
}

type ociRoot struct {
	Path     string `json:"path"`
	Readonly bool   `json:"readonly"`
}

type ociMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type"`
	Source      string   `json:"source"`
	Options     []string `json:"options,omitempty"`
}

type ociLinux struct {
	Namespaces  []ociNS    `json:"namespaces"`
	CgroupsPath string     `json:"cgroupsPath,omitempty"`
	UIDMappings []ociIDMap `json:"uidMappings"`
	GIDMappings []ociIDMap `json:"gidMappings"`
}

type ociNS struct {
	Type string `json:"type"`
	Path string `json:"path,omitempty"`
}

type ociIDMap struct {
	ContainerID uint32 `json:"containerID"`
	HostID      uint32 `json:"hostID"`
	Size        uint32 `json:"size"`
}

// layout is what New prepared for every run: the skeleton root and the
// mounts of the base, the workspace and the caller's paths, their host
// sources already idmapped or overlaid.
type layout struct {
	root   string // the skeleton
	mounts []ociMount
}

// prepare builds the skeleton root in dir and the mounts. The base's
// top-level directories are bound read-only; the caller's directories
// come through ids (idmapped, so that their owner is the sandbox's root).
func (s *Sandbox) prepare(dir, base string, names []string) error {
	sp := &s.spec
	skel := filepath.Join(dir, "root")
	if err := os.Mkdir(skel, 0o755); err != nil {
		return err
	}
	s.lay.root = skel
	var ms []ociMount
	add := func(dst, src string, ro bool) {
		opt := []string{"rbind", "rw"}
		if ro {
			opt = []string{"rbind", "ro"}
		}
		ms = append(ms, ociMount{Destination: dst, Type: "bind", Source: src, Options: opt})
	}
	top := map[string]bool{}
	for _, n := range names {
		p := filepath.Join(base, n)
		fi, err := os.Lstat(p)
		if err != nil {
			continue // a system directory this host lacks
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(l, filepath.Join(skel, n)); err != nil {
				return err
			}
		case fi.IsDir():
			if err := os.Mkdir(filepath.Join(skel, n), 0o755); err != nil {
				return err
			}
			add("/"+n, p, true)
		default:
			if err := os.WriteFile(filepath.Join(skel, n), nil, 0o644); err != nil {
				return err
			}
			add("/"+n, p, true)
		}
		top[n] = true
	}
	for _, d := range []string{"proc", "dev", "sys", "tmp"} {
		if !top[d] {
			os.Mkdir(filepath.Join(skel, d), 0o755)
		}
	}
	// The caller's paths: mount points are made in the skeleton, never in
	// the base (which the gofer could not write).
	var own []ociMount
	point := func(field, target string, file bool) error {
		first, _, _ := strings.Cut(strings.TrimPrefix(target, "/"), "/")
		if top[first] {
			if err := existsIn(base, target); err != nil {
				return &sandbox.SpecError{Field: field, Err: fmt.Errorf("%s lies in the base's /%s, where the gvisor runtime can make no mount point", target, first)}
			}
			return nil
		}
		p := filepath.Join(skel, target)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if file {
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			return f.Close()
		}
		return os.MkdirAll(p, 0o755)
	}
	bindOwn := func(field, src, target string, ro bool) error {
		fi, err := os.Stat(src)
		if err != nil {
			return &sandbox.SpecError{Field: field, Err: err}
		}
		if err := point(field, target, !fi.IsDir()); err != nil {
			return err
		}
		view, err := s.ids.Bind(src)
		if err != nil {
			return &sandbox.SpecError{Field: field, Err: err}
		}
		opt := []string{"rbind", "rw"}
		if ro {
			opt = []string{"rbind", "ro"}
		}
		own = append(own, ociMount{Destination: target, Type: "bind", Source: view, Options: opt})
		return nil
	}
	overlay := func(field, src string, c *sandbox.Capture) error {
		if err := point(field, src, false); err != nil {
			return err
		}
		// overlayfs writes the upper directory as the sandbox's root,
		// which must own it (as for a container).
		for _, d := range []string{filepath.Dir(c.Upper), c.Upper, c.Work} {
			if err := os.Lchown(d, store.RootIDBase, store.RootIDBase); err != nil {
				return &sandbox.SpecError{Field: "capture", Err: err}
			}
		}
		view, err := s.ids.Bind(src)
		if err != nil {
			return &sandbox.SpecError{Field: field, Err: err}
		}
		merged, err := s.ids.Overlay(view, c.Upper, c.Work)
		if err != nil {
			return &sandbox.SpecError{Field: "capture", Err: err}
		}
		own = append(own, ociMount{Destination: src, Type: "bind", Source: merged, Options: []string{"rbind", "rw"}})
		return nil
	}
	if sp.Workspace != "" {
		var err error
		switch sp.Access {
		case sandbox.AccessReadWrite:
			err = bindOwn("workspace", sp.Workspace, sp.Workspace, false)
		case sandbox.AccessReadOnly:
			err = bindOwn("workspace", sp.Workspace, sp.Workspace, true)
		case sandbox.AccessChangeset:
			err = overlay("workspace", sp.Workspace, sp.Changeset)
		}
		if err != nil {
			return err
		}
	}
	for i := range sp.Captures {
		if err := overlay("capture", sp.Captures[i].Path, &sp.Captures[i]); err != nil {
			return err
		}
	}
	for _, m := range sp.Mounts {
		if err := bindOwn("mount", m.Source, m.Target, m.ReadOnly); err != nil {
			return err
		}
	}
	if s.net != nil {
		// pinfold's DNS server, as in a native sandbox.
		target, err := resolvTarget(base, top)
		if err != nil {
			return err
		}
		if err := point("network", target, true); err != nil {
			return err
		}
		src := filepath.Join(dir, "resolv.conf")
		if err := os.WriteFile(src, []byte("nameserver "+netpolicy.DNSAddr.String()+"\n"), 0o644); err != nil {
			return err
		}
		own = append(own, ociMount{Destination: target, Type: "bind", Source: src, Options: []string{"rbind", "ro"}})
	}
	// Outer mounts first: a workspace under /tmp lands on the tmpfs.
	slices.SortStableFunc(own, func(a, b ociMount) int {
		return strings.Count(a.Destination, "/") - strings.Count(b.Destination, "/")
	})
	tmp := ociMount{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs",
		Options: []string{"nosuid", "nodev", "mode=1777", "size=" + strconv.FormatInt(sp.Limits.TmpSize, 10)}}
	if sp.Scratch != "" {
		// --disk: /tmp is the run's volume's directory (mode 1777), so
		// that what it holds counts against the volume, with the
		// changeset's writes.
		// The gofer reaches it, as the caller's directories, through an
		// idmapped view (the store's directories are root's alone).
		view, err := s.ids.Bind(sp.Scratch)
		if err != nil {
			return &sandbox.SpecError{Field: "scratch", Err: err}
		}
		tmp = ociMount{Destination: "/tmp", Type: "bind", Source: view, Options: []string{"rbind", "rw", "nosuid", "nodev"}}
	}
	// gVisor's own sysfs describes its virtual machine, not the host's;
	// a native sandbox's /sys is empty, and so is this one.
	sys := ociMount{Destination: "/sys", Type: "tmpfs", Source: "tmpfs", Options: []string{"ro", "nosuid", "nodev", "noexec", "size=4k", "mode=0555"}}
	s.lay.mounts = append([]ociMount{{Destination: "/proc", Type: "proc", Source: "proc"}, sys, tmp}, ms...)
	s.lay.mounts = append(s.lay.mounts, own...)
	return nil
}

// config returns the bundle's config.json for one command.
// cgroupsPath names the run's host group (limits), or is empty.
// nw is the run's network (nil: none).
func (s *Sandbox) config(cmd *sandbox.Cmd, cgroupsPath string, nw *network) ([]byte, error) {
	env := cmd.Env
	if env == nil {
		env = sandbox.DefaultEnv(&s.spec, cmd.TTY)
	}
	dir := cmd.Dir
	if dir == "" {
		dir = "/"
		if s.spec.Workspace != "" && s.spec.Access != sandbox.AccessNone {
			dir = s.spec.Workspace
		}
	}
	ids := []ociIDMap{{ContainerID: 0, HostID: store.RootIDBase, Size: container.SandboxIDs}}
	none := []string{}
	spec := ociSpec{
		Version: "1.0.2",
		Process: ociProcess{Args: cmd.Args, Env: env, Cwd: dir, NoNewPrivs: true,
			Capabilities: ociCaps{none, none, none, none, none}},
		Root:     ociRoot{Path: s.lay.root, Readonly: true},
		Hostname: s.spec.Hostname,
		Mounts:   s.lay.mounts,
		Linux: ociLinux{
			Namespaces: []ociNS{{Type: "pid"}, {Type: "network"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}, {Type: "user"}},
			// The Sentry and gofer run as the sandbox range, never as
			// host root.
			UIDMappings: ids, GIDMappings: ids,
			CgroupsPath: cgroupsPath,
		},
	}
	if nw != nil {
		spec.Linux.Namespaces[1].Path = nw.ns
	}
	if n := s.cglim.Pids; n > 0 {
		// The host group counts host threads, and the Sentry runs a
		// process's threads on a few of them: without a bound of the
		// Sentry's own, threads past --pids were never refused. The
		// Sentry refuses a task past RLIMIT_NPROC (per user, threads
		// included; the command cannot raise it without CAP_SYS_RESOURCE),
		// set to the host group's limit so that processes, which cost
		// host threads, reach the group's first and are reported there.
		spec.Process.Rlimits = []ociRlimit{{Type: "RLIMIT_NPROC", Hard: uint64(n), Soft: uint64(n)}}
	}
	if cmd.TTY {
		spec.Process.Terminal = true
		spec.Process.ConsoleSize = &ociSize{Height: cmd.Rows, Width: cmd.Cols}
	}
	return json.Marshal(&spec)
}

// resolvTarget is where pinfold's resolv.conf is mounted: the base's
// /etc/resolv.conf, or where it links to (systemd-resolved's
// /etc/resolv.conf is a link into /run, which the sandbox resolves in
// its own root), once. Inside one of the base's top-level directories
// the file must exist: the gofer makes no mount point there.
//
// The base's links are resolved in the base's root, as the sandbox
// resolves them, never on the host: a tar, oci or dir base is not the
// host's (a link to /root or /proc in it names the base's).
func resolvTarget(base string, top map[string]bool) (string, error) {
	target := "/etc/resolv.conf"
	if !top["etc"] {
		return target, nil
	}
	root, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", &sandbox.SpecError{Field: "network", Err: err}
	}
	defer unix.Close(root)
	st, link, err := lstatIn(root, target)
	if err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		l := link
		if !filepath.IsAbs(l) {
			l = filepath.Join("/etc", l)
		}
		target = filepath.Clean(l)
		first, _, _ := strings.Cut(strings.TrimPrefix(target, "/"), "/")
		if !top[first] {
			return target, nil // in the skeleton: a mount point is made
		}
		st, _, err = lstatIn(root, target)
	}
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", &sandbox.SpecError{Field: "network", Err: fmt.Errorf("the base's %s is not a file, which the gvisor runtime needs to mount pinfold's over", target)}
	}
	return target, nil
}

// lstatIn stats name in the base open as root, its directories' links
// resolved inside the base (RESOLVE_IN_ROOT) and its last component not
// followed; for a link it returns the link's target too.
func lstatIn(root int, name string) (unix.Stat_t, string, error) {
	var st unix.Stat_t
	fd, err := unix.Openat2(root, strings.TrimPrefix(name, "/"), &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return st, "", err
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil {
		return st, "", err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		return st, "", nil
	}
	b := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, "", b)
	if err != nil {
		return st, "", err
	}
	return st, string(b[:n]), nil
}

// existsIn reports (nil) whether name exists in the base, its links
// resolved in the base's root as the gofer resolves a mount point's.
func existsIn(base, name string) error {
	fd, err := unix.Openat2(unix.AT_FDCWD, base, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC})
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	f, err := unix.Openat2(fd, strings.TrimPrefix(name, "/"), &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return err
	}
	unix.Close(f)
	return nil
}
