package container

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pinfold/pinfold/internal/cgroup"
	"github.com/pinfold/pinfold/internal/store"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/internal/netconf"
)

// prepare finds or imports the base's image and turns the spec into run
// flags.
func (s *Sandbox) prepare(ctx context.Context) error {
	sp := &s.spec
	var a []string
	add := func(args ...string) { a = append(a, args...) }
	for _, p := range pathsOf(sp) {
		if err := mountable(p); err != nil {
			return &sandbox.SpecError{Field: "mount", Err: err}
		}
	}
	if err := s.base(ctx, &a); err != nil {
		return err
	}
	add("--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges")
	for _, c := range sp.Capabilities {
		add("--cap-add", c)
	}
	add("--tmpfs", fmt.Sprintf("/tmp:rw,exec,size=%d,mode=1777", sp.Limits.TmpSize))
	// The engines show the host's sysfs (read-only); a native sandbox's
	// /sys is empty. The engines still put the container's own cgroups
	// at /sys/fs/cgroup.
	add("--tmpfs", "/sys:ro,nosuid,nodev,noexec,size=4k,mode=0555")
	cfg, err := netconf.Config(sp)
	if err != nil {
		return err
	}
	s.net = cfg
	switch {
	case sp.Network == sandbox.NetworkHost:
		add("--network", "host")
	case cfg == nil:
		add("--network", "none", "--hostname", sp.Hostname)
	}
	// Otherwise Run joins the command to a network holder of its own.
	ids, err := s.users(&a)
	if err != nil {
		return err
	}
	if err := s.volumes(ids, &a); err != nil {
		return err
	}
	// Limits are pinfold's own cgroup, the container's parent (see Run):
	// its counters say which limit a command hit.
	if l := sp.Limits; l.Memory > 0 || l.Pids > 0 || l.CPUs > 0 {
		sys, err := cgroup.Detect()
		if err != nil {
			return &sandbox.SpecError{Field: "limits", Err: fmt.Errorf("%w: %w", sandbox.ErrLimits, err)}
		}
		s.cgsys = sys
	}
	add("-v", Tini+":/.pinfold/tini:ro", "--entrypoint", "/.pinfold/tini")
	s.args = a
	return nil
}

// base finds the image of the spec's base, or makes the skeleton image
// of its top level, and adds the read-only binds of its directories to a.
func (s *Sandbox) base(ctx context.Context, a *[]string) error {
	sp := &s.spec
	if sp.Base.Kind == sandbox.BaseOCI && sp.Base.Path == "" {
		s.image = sp.Base.Ref
		return nil
	}
	root, names := "/", sandbox.HostSystemDirs()
	if sp.Base.Kind != sandbox.BaseHost {
		root = sp.Base.Path
		if sp.Base.Kind != sandbox.BaseDir {
			// tar, debian-12 and image files: the root pinfold's
			// store unpacked, shared with native runs.
			var err error
			if root, err = s.storeBase(ctx); err != nil {
				return err
			}
		}
		ents, err := os.ReadDir(root)
		if err != nil {
			return &sandbox.SpecError{Field: "base", Err: err}
		}
		names = names[:0]
		for _, e := range ents {
			names = append(names, e.Name())
		}
	}
	img, binds, err := s.rt.skeleton(ctx, root, names, s.rt.store)
	if err != nil {
		return err
	}
	s.stty = exists(filepath.Join(root, "bin/sh")) && exists(filepath.Join(root, "usr/bin/stty"))
	s.image = img
	for _, b := range binds {
		*a = append(*a, "-v", b+":"+strings.TrimPrefix(b, strings.TrimSuffix(root, "/"))+":ro")
	}
	return nil
}

// volumes adds the volumes of the workspace, the captures and the mounts
// to a, each through its idmapped view when ids is set.
func (s *Sandbox) volumes(ids *idMounts, a *[]string) error {
	sp := &s.spec
	bind := func(field, p string) (string, error) { return p, nil }
	if ids != nil {
		bind = func(field, p string) (string, error) {
			q, err := ids.bind(p)
			if err != nil {
				return "", &sandbox.SpecError{Field: field, Err: err}
			}
			return q, nil
		}
		// overlayfs writes a changeset's upper directories as the
		// container's root, which must own them (as natively).
		for _, c := range captures(sp) {
			for _, d := range []string{filepath.Dir(c.Upper), c.Upper, c.Work} {
				if err := os.Lchown(d, store.RootIDBase, store.RootIDBase); err != nil {
					return &sandbox.SpecError{Field: "capture", Err: err}
				}
			}
		}
	}
	if sp.Access != sandbox.AccessNone && sp.Workspace != "" {
		src, err := bind("workspace", sp.Workspace)
		if err != nil {
			return err
		}
		switch sp.Access {
		case sandbox.AccessReadWrite:
			*a = append(*a, "-v", src+":"+sp.Workspace)
		case sandbox.AccessReadOnly:
			*a = append(*a, "-v", src+":"+sp.Workspace+":ro")
		case sandbox.AccessChangeset:
			o, err := s.overlay(src, sp.Workspace, sp.Changeset)
			if err != nil {
				return err
			}
			*a = append(*a, o...)
		}
	}
	for i := range sp.Captures {
		src, err := bind("capture", sp.Captures[i].Path)
		if err != nil {
			return err
		}
		o, err := s.overlay(src, sp.Captures[i].Path, &sp.Captures[i])
		if err != nil {
			return err
		}
		*a = append(*a, o...)
	}
	for _, m := range sp.Mounts {
		src, err := bind("mount", m.Source)
		if err != nil {
			return err
		}
		v := src + ":" + m.Target
		if m.ReadOnly {
			v += ":ro"
		}
		*a = append(*a, "-v", v)
	}
	return nil
}

// pathsOf lists the host paths a spec hands the engine's mount syntax.
func pathsOf(sp *sandbox.Spec) []string {
	var ps []string
	if sp.Workspace != "" {
		ps = append(ps, sp.Workspace)
	}
	if sp.Changeset != nil {
		ps = append(ps, sp.Changeset.Upper, sp.Changeset.Work)
	}
	for _, m := range sp.Mounts {
		ps = append(ps, m.Source, m.Target)
	}
	for _, c := range sp.Captures {
		ps = append(ps, c.Path, c.Upper, c.Work)
	}
	if sp.Base.Kind == sandbox.BaseDir {
		ps = append(ps, sp.Base.Path)
	}
	return ps
}

// mountable refuses paths the engines' -v and --mount syntax cannot carry.
func mountable(p string) error {
	if strings.ContainsAny(p, ":,\"\\\n") {
		return fmt.Errorf("%q: the container engines' mount syntax cannot carry ':', ',', '\"', '\\' or a newline in a path", p)
	}
	return nil
}

// skeleton returns an image holding the top level of root (its
// directories empty, its symbolic links as they are) and the binds that
// fill it: every directory and file of names under root, read-only. The
// image is imported into the engine once, named by its content.
//
// Whether the engine has it is remembered in the store (asking the engine
// costs a client process, tens of milliseconds, on every run); a run that
// finds it gone forgets that (see Process.Wait).
func (r *Runtime) skeleton(ctx context.Context, root string, names []string, store string) (string, []string, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	var binds []string
	hdr := func(h *tar.Header) {
		h.ModTime = time.Unix(0, 0)
		tw.WriteHeader(h)
	}
	for _, d := range []string{"tmp", "proc", "dev", "sys", ".pinfold"} {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		hdr(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode})
	}
	slices.Sort(names)
	for _, n := range names {
		if slices.Contains([]string{"tmp", "proc", "dev", "sys", ".pinfold"}, n) {
			continue
		}
		p := filepath.Join(root, n)
		fi, err := os.Lstat(p)
		if err != nil {
			continue // this host has no such directory
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return "", nil, err
			}
			hdr(&tar.Header{Typeflag: tar.TypeSymlink, Name: n, Linkname: target, Mode: 0o777})
		case fi.IsDir() && n == "etc" && !(exists(p+"/hosts") && exists(p+"/hostname") && exists(p+"/resolv.conf")):
			// The engines bind their own hosts, hostname and resolv.conf
			// onto files in /etc, which a read-only bind of a base's /etc
			// without them cannot take: its entries are shown one by one
			// in an /etc of the image's.
			hdr(&tar.Header{Typeflag: tar.TypeDir, Name: n + "/", Mode: int64(fi.Mode().Perm())})
			ents, err := os.ReadDir(p)
			if err != nil {
				return "", nil, err
			}
			for _, e := range ents {
				ep := filepath.Join(p, e.Name())
				efi, err := os.Lstat(ep)
				if err != nil {
					continue
				}
				switch {
				case efi.Mode()&os.ModeSymlink != 0:
					target, _ := os.Readlink(ep)
					hdr(&tar.Header{Typeflag: tar.TypeSymlink, Name: n + "/" + e.Name(), Linkname: target, Mode: 0o777})
				case efi.IsDir():
					hdr(&tar.Header{Typeflag: tar.TypeDir, Name: n + "/" + e.Name() + "/", Mode: int64(efi.Mode().Perm())})
					binds = append(binds, ep)
				case efi.Mode().IsRegular():
					hdr(&tar.Header{Typeflag: tar.TypeReg, Name: n + "/" + e.Name(), Mode: int64(efi.Mode().Perm())})
					binds = append(binds, ep)
				}
			}
			for _, f := range []string{"hosts", "hostname", "resolv.conf"} {
				if !exists(p + "/" + f) {
					hdr(&tar.Header{Typeflag: tar.TypeReg, Name: n + "/" + f, Mode: 0o644})
				}
			}
		case fi.IsDir():
			hdr(&tar.Header{Typeflag: tar.TypeDir, Name: n + "/", Mode: int64(fi.Mode().Perm())})
			binds = append(binds, p)
		case fi.Mode().IsRegular():
			hdr(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: int64(fi.Mode().Perm())})
			binds = append(binds, p)
		}
		if err := mountable(p); err != nil {
			return "", nil, &sandbox.SpecError{Field: "base", Err: err}
		}
	}
	tw.Close()
	sum := sha256.Sum256(buf.Bytes())
	name := "localhost/pinfold-skeleton:" + hex.EncodeToString(sum[:])[:16]
	if _, ok := r.images.Load(name); ok {
		return name, binds, nil
	}
	mark := imageMark(store, r.engine, name)
	if mark != "" && exists(mark) {
		r.images.Store(name, struct{}{})
		return name, binds, nil
	}
	if exec.CommandContext(ctx, r.bin, "image", "inspect", "--format", "{{.Id}}", name).Run() != nil {
		imp := exec.CommandContext(ctx, r.bin, "import", "--change", "LABEL "+Label+"-skeleton=1", "-", name)
		imp.Stdin = &buf
		if out, err := imp.CombinedOutput(); err != nil {
			return "", nil, &engineError{engine: r.engine, detail: "importing the base's skeleton image: " + firstLine(string(out))}
		}
	}
	r.images.Store(name, struct{}{})
	if mark != "" && os.MkdirAll(filepath.Dir(mark), 0o700) == nil {
		os.WriteFile(mark, nil, 0o600)
	}
	return name, binds, nil
}

// imageMark is the store's record that the engine holds image name.
func imageMark(store, engine, name string) string {
	if store == "" {
		return ""
	}
	return filepath.Join(store, "containers", engine+"-"+strings.NewReplacer("/", "_", ":", "_").Replace(name))
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// overlay shows dir (from src, dir itself or its idmapped view) with its
// writes going to c's upper directory (the changeset's, in pinfold's
// store).
func (s *Sandbox) overlay(src, dir string, c *sandbox.Capture) ([]string, error) {
	if s.idm != nil {
		// A root pinfold mounts the overlay itself, volatile (see
		// idMounts.overlay), for docker too: docker's overlay volume
		// costs its daemon a volume record made and removed (database
		// syncs) and an unmount that syncs the store's file system,
		// some 10 to 15 ms of a run.
		merged, err := s.idm.overlay(src, c.Upper, c.Work)
		if err != nil {
			return nil, &sandbox.SpecError{Field: "capture", Err: err}
		}
		return []string{"-v", merged + ":" + dir}, nil
	}
	if s.rt.engine == PodmanName {
		return []string{"-v", src + ":" + dir + ":O,upperdir=" + c.Upper + ",workdir=" + c.Work}, nil
	}
	// An anonymous volume of the local driver mounting the overlay; it
	// goes with the container. nocopy: docker would otherwise fill an
	// empty volume from the image and give its root the image's owner
	// (root), over the upper directory's.
	return []string{"--mount", `type=volume,dst=` + dir + `,volume-nocopy=true,volume-label=` + Label + `=` + Owner() + `,volume-driver=local,volume-opt=type=overlay,volume-opt=device=overlay,"volume-opt=o=lowerdir=` +
		src + `,upperdir=` + c.Upper + `,workdir=` + c.Work + `"`}, nil
}

// storeBase unpacks (or finds) the spec's tar, debian-12 or image-file
// base in pinfold's store and returns its root (store.SpecBase).
func (s *Sandbox) storeBase(ctx context.Context) (string, error) {
	root, release, err := store.SpecBase(ctx, s.rt.store, s.spec.Base)
	if err != nil {
		return "", err
	}
	s.release = release
	return root, nil
}

// users adds the ids the container runs as and, when pinfold runs as
// root, returns the idmapped mounts that show it the caller's
// directories (see sandboxIDs).
func (s *Sandbox) users(a *[]string) (*idMounts, error) {
	sp := &s.spec
	owner := [2]uint32{uint32(os.Getuid()), uint32(os.Getgid())}
	if sp.Workspace != "" {
		// Files written in the workspace belong to its owner, as natively.
		if fi, err := os.Stat(sp.Workspace); err == nil {
			st := fi.Sys().(*syscall.Stat_t)
			owner = [2]uint32{st.Uid, st.Gid}
		}
	}
	if os.Geteuid() != 0 {
		if s.rt.engine == DockerName {
			// The daemon runs containers as the host ids they name: only
			// the caller's own are the caller's to give (Features refuses
			// root inside).
			owner = [2]uint32{uint32(os.Getuid()), uint32(os.Getgid())}
		}
		user := fmt.Sprintf("%d:%d", owner[0], owner[1])
		if sp.Root {
			user = "0:0"
		}
		*a = append(*a, "--user", user)
		return nil, nil
	}
	if s.rt.engine == PodmanName {
		// The user namespace is added by Run, which may join the network
		// holder's instead.
		s.userns = rootIDArgs(s.rt.engine)
		*a = append(*a, "--user", "0:0")
	} else {
		*a = append(*a, rootIDArgs(s.rt.engine)...)
	}
	s.idm = newIDMounts(owner[0], owner[1])
	return s.idm, nil
}

// rootIDArgs are the flags that keep a container of a root pinfold off
// host root: podman's user namespace over the sandbox range, or docker's
// user, the range's first id.
func rootIDArgs(engine string) []string {
	id := strconv.Itoa(store.RootIDBase)
	if engine == PodmanName {
		m := "0:" + id + ":" + strconv.Itoa(sandboxIDs)
		return []string{"--uidmap", m, "--gidmap", m}
	}
	return []string{"--user", id + ":" + id}
}

// captures lists the spec's overlays: the workspace's changeset and the
// other captured directories.
func captures(sp *sandbox.Spec) []*sandbox.Capture {
	var cs []*sandbox.Capture
	if sp.Access == sandbox.AccessChangeset && sp.Changeset != nil {
		cs = append(cs, sp.Changeset)
	}
	for i := range sp.Captures {
		cs = append(cs, &sp.Captures[i])
	}
	return cs
}
