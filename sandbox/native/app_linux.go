package native

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/internal/appmount"
	initp "github.com/pinfold/pinfold/internal/backend/native"
	"github.com/pinfold/pinfold/internal/landlock"
	"github.com/pinfold/pinfold/internal/pack"
	"github.com/pinfold/pinfold/internal/store"
	"github.com/pinfold/pinfold/sandbox"
)

// An app (pinfold pack app) carries its merged root as a squashfs image.
// Where this host can, a run mounts that image instead of unpacking the
// app's layers into the store: squashfuse serves it from inside the
// sandbox's user and pid namespaces, so the owners it reports are
// the sandbox's own ids (uid 0 of the image is the sandbox's root, as in
// the store's shifted roots), and it dies with the sandbox. See
// docs/pack.md, "How it starts".

// ErrAppMount is wrapped when the sandbox could not mount an app's root
// image (squashfuse missing its libraries, /dev/fuse refused, the file
// changed after it was checked).
var ErrAppMount = errors.New("mounting the app's root image failed")

// appStage is where the init mounts the image before it shows its
// top-level entries and detaches it.
const appStage = "/.pinfold-app"

// appRoot is an app file whose root image a run may mount.
type appRoot struct {
	f      *os.File
	st     unix.Stat_t
	root   *pack.AppRoot
	daemon string
}

// appCandidate returns the app base of the spec when its root image can
// be mounted here; nil when the run unpacks it (not an app, an app
// without a root image, a signed app run by its verified digest, a host
// without squashfuse or /dev/fuse, or a plan the mount cannot serve).
func (s *Sandbox) appCandidate(plan *rootPlan) *appRoot {
	sp := &s.spec
	// A verified run (Ref is the signed digest) reads only what the
	// signature covers: the manifest and its layers.
	if sp.Base.Kind != sandbox.BaseOCI || sp.Base.Ref != "" || !strings.HasSuffix(sp.Base.Path, ".pinfold") ||
		sp.BaseWrites != "" || plan.resolver {
		return nil
	}
	daemon, err := appmount.Daemon()
	if err != nil {
		return nil
	}
	f, err := os.Open(sp.Base.Path)
	if err != nil {
		return nil
	}
	a := &appRoot{f: f, daemon: daemon}
	if err := unix.Fstat(int(f.Fd()), &a.st); err != nil || a.st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil
	}
	if a.root, err = pack.ReadAppRoot(f); err != nil || a.root == nil {
		f.Close()
		return nil
	}
	// An app already unpacked into the store (by a run that verified its
	// signature, or with appmount.Env=0) starts faster from there.
	if cd, err := a.root.ConfigDigest(f); err == nil {
		if st, err := s.openStore(); err == nil && st.HasOCIBase(cd, store.ImportOptions{UIDShift: store.Shift()}) {
			f.Close()
			return nil
		}
	}
	return a
}

// fits reports whether the root image can be shown with the plan's mount
// points: each must be a top-level directory of the image or lie outside
// its top-level entries (the image's directories are shown whole).
func (a *appRoot) fits(plan *rootPlan) bool {
	points := []string{}
	for _, b := range plan.binds {
		points = append(points, b.dst)
	}
	for _, o := range plan.overlays {
		points = append(points, o.at())
	}
	points = append(points, plan.hide...)
	for _, p := range points {
		top, _, _ := strings.Cut(strings.TrimPrefix(p, "/"), "/")
		for _, e := range a.root.Top {
			if e.Name == top && (p != "/"+top || e.Type != "dir") {
				return false
			}
		}
	}
	return true
}

// check checks the image against its digest (once per file identity) and
// returns what buildRoot needs. A file that fails is refused.
func (a *appRoot) check(st *store.Store) (*appMount, error) {
	defer a.f.Close()
	what := fmt.Sprintf("app root %s at %d", a.root.Digest, a.root.Offset)
	if err := st.CheckOnce(a.f, what, func() error { return a.root.Verify(a.f) }); err != nil {
		return nil, &sandbox.SpecError{Field: "base", Err: err}
	}
	// The init opens the file by this path without following a last
	// symbolic link; the identity it checks is the file's, wherever.
	file := a.f.Name()
	if real, err := filepath.EvalSymlinks(file); err == nil {
		file = real
	}
	return &appMount{
		file:   file,
		daemon: a.daemon,
		ident: initp.FuseIdentity(a.st.Dev, a.st.Ino, a.st.Size, [2]int64{a.st.Mtim.Sec, a.st.Mtim.Nsec},
			[2]int64{a.st.Ctim.Sec, a.st.Ctim.Nsec}, a.root.Offset),
		top: a.root.Top,
	}, nil
}

// appMount is an app's root image as buildRoot mounts it.
type appMount struct {
	file, daemon, ident string
	top                 []pack.RootEntry
}

// mountApp mounts the image at appStage. It comes first among the ops, so
// that squashfuse starts while the init builds /dev, /proc and /tmp.
func (l *layout) mountApp(m *appMount) {
	l.mkdirAll(appStage, 0o700)
	l.add(initp.Op{Kind: initp.OpFuse, A: m.file, B: appStage, C: m.daemon, D: m.ident,
		What: "mounting the app " + m.file})
}

// placeApp shows the mounted image's top-level entries as placeBase shows
// a directory's, then detaches the staging mount (the binds keep the image
// mounted).
func (l *layout) placeApp(m *appMount, points []string) {
	const attr = attrRdonly | attrNosuid | attrNodev
	for _, e := range m.top {
		dst := "/" + e.Name
		if isOwnMount(dst) || strings.Contains(e.Name, "/") || e.Name == "" || e.Name == "." || e.Name == ".." ||
			dst == appStage {
			continue
		}
		is := false
		for _, p := range points {
			is = is || p == dst
		}
		switch e.Type {
		case "symlink":
			l.add(initp.Op{Kind: initp.OpSymlink, A: e.Link, B: dst})
		case "dir":
			l.made[dst] = true
			l.add(initp.Op{Kind: initp.OpMkdir, B: dst, Mode: e.Mode & 0o7777})
			if !is {
				l.add(initp.Op{Kind: initp.OpBind, A: appStage + dst, B: dst, MountFlags: syscall.MS_REC, Attr: attr,
					What: "mounting " + dst + " from the app"})
				l.grant(dst, landlock.Read)
			}
		case "file":
			l.add(initp.Op{Kind: initp.OpMkfile, B: dst, Mode: e.Mode & 0o7777})
			if !is {
				l.add(initp.Op{Kind: initp.OpBind, A: appStage + dst, B: dst, Attr: attr,
					What: "mounting " + dst + " from the app"})
				l.grant(dst, landlock.Read)
			}
		}
	}
	l.unstageApp()
}

// unstageApp detaches the staging mount once the entries are shown.
func (l *layout) unstageApp() {
	l.add(initp.Op{Kind: initp.OpUmount, B: appStage, What: "detaching " + appStage})
	l.add(initp.Op{Kind: initp.OpRmdir, B: appStage})
}
