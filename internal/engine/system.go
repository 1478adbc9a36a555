package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pinfold/pinfold/internal/capability"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/internal/store"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/native"
)

// OpenStore opens the engine's store, with a coded error when it cannot.
func (e *Engine) OpenStore() (*store.Store, error) {
	if e.Store == "" {
		return nil, fault.New(fault.Store, "cannot find pinfold's store", "", "set PINFOLD_STORE", nil)
	}
	st, err := store.Open(e.Store)
	if err != nil {
		return nil, fault.New(fault.Store, "opening the store: "+err.Error(), "", "check the permissions of "+e.Store, err)
	}
	return st, nil
}

// BaseName is how a base is written on the command line.
func BaseName(b sandbox.Base) string {
	if b.Path == "" {
		if b.Ref != "" {
			return string(b.Kind) + ":" + b.Ref
		}
		return string(b.Kind)
	}
	s := string(b.Kind) + ":" + b.Path
	if b.Ref != "" {
		s += ":" + b.Ref
	}
	return s
}

// Describe works out what p's sandbox is made of (its base's id, its
// capabilities and why each is there, the packages they need, the sandbox
// id and whether its image is built) without building anything. st may be
// nil: then store ids are left empty.
func (e *Engine) Describe(ctx context.Context, st *store.Store, p *plan.Plan) (*plan.System, error) {
	sp := &p.Sandbox
	sys := &plan.System{}
	var root string
	switch sp.Base.Kind {
	case sandbox.BaseHost:
		sys.BaseID = "host"
	case sandbox.BaseDir:
		sys.BaseID = "dir:" + sp.Base.Path
		root = sp.Base.Path
	case sandbox.BaseDebian12:
		if st != nil {
			if b, err := st.CuratedBase(string(sp.Base.Kind)); err == nil {
				sys.BaseID, root = b.Digest, b.Root
			}
		}
	case sandbox.BaseTar, sandbox.BaseOCI:
		if st != nil {
			id, err := st.BaseID(ctx, string(sp.Base.Kind), sp.Base.Path, sp.Base.Ref)
			if err != nil {
				return sys, fault.New(fault.BadBase, err.Error(), "", "check the --base path", err)
			}
			sys.BaseID = id
		}
	}
	curated := sp.Base.Kind == sandbox.BaseDebian12
	var inferred []capability.Finding
	if p.Auto && curated && sp.Workspace != "" {
		// What could be read counts even when a file could not.
		f, _ := capability.FromLockfiles(sp.Workspace)
		inferred = append(inferred, f...)
		if root != "" {
			f, _ := capability.FromELF(ctx, sp.Workspace, providedIn(root))
			inferred = append(inferred, f...)
		}
	}
	caps, findings := capability.Merge(p.Capabilities, inferred, p.Auto && curated)
	sys.Capabilities = caps
	for _, f := range findings {
		sys.Findings = append(sys.Findings, plan.Finding{Capability: f.Capability, Source: string(f.Source), Evidence: f.Evidence})
	}
	if len(caps) > 0 && !curated {
		return sys, fault.New(fault.CapUnavailable,
			fmt.Sprintf("capabilities %s need a base pinfold builds: the %s base has what it has", strings.Join(caps, ", "), BaseName(sp.Base)),
			"", "use --base debian-12 (or drop capabilities from the config)", nil)
	}
	for _, c := range caps {
		pkgs, err := capability.Packages(c, capability.Base(sp.Base.Kind), true)
		if err != nil {
			code := fault.CapUnavailable
			if errors.Is(err, capability.ErrUnknown) {
				code = fault.CapUnknown
			}
			return sys, fault.New(code, err.Error(), "", "pinfold capability list shows the catalog", err)
		}
		sys.Packages = append(sys.Packages, pkgs...)
	}
	if sys.BaseID != "" {
		sys.SandboxID = store.SandboxID(sys.BaseID, caps, []string{"profile=" + p.Audit.Profile})
		if len(caps) > 0 && st != nil {
			if img, err := st.Image(sys.SandboxID); err == nil {
				sys.Image, sys.ImageCreated = img.Root, img.Created
			} else if errors.Is(err, store.ErrFormat) {
				return sys, fault.New(fault.FormatMismatch, err.Error(), "", "run pinfold gc, then run again", err)
			}
		}
	}
	return sys, nil
}

// checkFrozen refuses capabilities inference found that the config does
// not list, where the config is frozen (CI=true or --frozen).
func checkFrozen(p *plan.Plan, sys *plan.System) error {
	for _, f := range sys.Findings {
		if f.Source != string(capability.Explicit) && f.Capability != "" && !slices.Contains(p.Capabilities, f.Capability) {
			return fault.New(fault.CapUnknown, "capability "+f.Capability+" is needed but not in the config ("+f.Source+": "+f.Evidence+")",
				"the config is frozen here (CI=true or --frozen): pinfold does not add capabilities on its own",
				"add it: capabilities: ["+f.Capability+"] in pinfold.yaml (pinfold capability add "+f.Capability+")", nil)
		}
	}
	return nil
}

// providedIn reports whether a base's library directories hold a soname.
func providedIn(root string) func(string) bool {
	dirs := []string{"usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu", "usr/lib", "lib", "usr/lib64", "lib64", "usr/local/lib"}
	return func(soname string) bool {
		for _, d := range dirs {
			if _, err := os.Lstat(filepath.Join(root, d, soname)); err == nil {
				return true
			}
		}
		return false
	}
}

// ensureSystem puts p's root in place and returns the base the sandbox
// is made from: a curated base is built on its first use, and the image
// of its capabilities (named by the sandbox id) once; the run's base is
// then that image's directory. Other bases are prepared by the runtime.
func (e *Engine) ensureSystem(ctx context.Context, p *plan.Plan) (sandbox.Base, error) {
	base := p.Sandbox.Base
	if base.Kind != sandbox.BaseDebian12 {
		return base, nil
	}
	st, err := e.OpenStore()
	if err != nil {
		return base, err
	}
	name := string(base.Kind)
	if _, err := st.CuratedBase(name); errors.Is(err, store.ErrNotBuilt) {
		if _, err := e.BuildBase(ctx, st, name, ""); err != nil {
			return base, err
		}
	}
	sys := p.System
	if sys == nil || sys.BaseID == "" {
		// Derived again now that the base is there (the ELF scan needs it).
		if sys, err = e.Describe(ctx, st, p); err != nil {
			return base, err
		}
	}
	if len(sys.Capabilities) == 0 {
		return base, nil
	}
	root := sys.Image
	if root == "" {
		img, err := st.Image(sys.SandboxID)
		if err != nil {
			if img, err = e.buildImage(ctx, st, p, sys); err != nil {
				return base, err
			}
		}
		root = img.Root
	}
	// Marked in use until this process exits: gc and rm leave it alone.
	store.UseBase(root)
	return sandbox.Base{Kind: sandbox.BaseDir, Path: root}, nil
}

// buildImage installs a system's packages on its curated base, as the
// image named by its sandbox id.
func (e *Engine) buildImage(ctx context.Context, st *store.Store, p *plan.Plan, sys *plan.System) (store.ImageInfo, error) {
	base, err := st.CuratedBase(string(p.Sandbox.Base.Kind))
	if err != nil {
		return store.ImageInfo{}, fault.New(fault.BadBase, err.Error(), "", "pinfold base build debian-12", err)
	}
	op := "image " + Short(sys.SandboxID)
	e.notice("adding %s to %s (once; image %s)", strings.Join(sys.Capabilities, ", "), BaseName(p.Sandbox.Base), Short(sys.SandboxID))
	img, err := st.BuildImage(ctx, store.ImageInfo{ID: sys.SandboxID, Capabilities: sys.Capabilities, Packages: sys.Packages, Version: e.Version},
		base, func(ctx context.Context, writes string) error {
			return e.installPackages(ctx, op, base, writes, sys.Packages)
		})
	if e.Report != nil {
		e.Report.Done(op, err)
	}
	if err != nil {
		var fe *fault.Error
		if errors.As(err, &fe) {
			return img, err
		}
		return img, fault.New(fault.BaseBuild, "building the image: "+err.Error(), "", "check the mirror and the disk, then run again", err)
	}
	return img, nil
}

// installPackages runs apt-get in a sandbox of base whose writes land in
// writes, with the network allowed to the mirror's host only.
func (e *Engine) installPackages(ctx context.Context, op string, base store.Base, writes string, pkgs []string) error {
	mirror, err := store.AptMirror(base.Root, "bookworm")
	if err != nil {
		return fault.New(fault.BaseBuild, "the base names no Debian mirror in its apt sources", "", "rebuild the base: pinfold base rm, then pinfold base build debian-12", err)
	}
	host := mirror
	if i := strings.Index(host, "://"); i >= 0 {
		host = host[i+3:]
	}
	host, _, _ = strings.Cut(host, "/")
	host, _, _ = strings.Cut(host, ":")
	script := "set -e; apt-get -q update; apt-get -q install -y --no-install-recommends " + strings.Join(pkgs, " ") +
		"; apt-get clean; rm -rf /var/lib/apt/lists/*"
	spec := sandbox.Spec{
		Base:       sandbox.Base{Kind: sandbox.BaseDir, Path: base.Root},
		BaseWrites: writes,
		Root:       true,
		// dpkg sets owners and modes, apt drops to its own user to download.
		Capabilities: []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID", "KILL"},
		Network:      sandbox.NetworkAllow,
		Net:          sandbox.NetPolicy{Allow: []string{host}},
		Limits:       sandbox.Limits{TmpSize: 1 << 30},
	}
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
		"DEBIAN_FRONTEND=noninteractive", "LC_ALL=C"}
	var out io.Writer = io.Discard
	if e.Report != nil {
		out = &aptSteps{w: e.Report.Output(op), s: &stepper{r: e.Report, op: op}}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	res, err := native.Run(ctx, spec, &sandbox.Cmd{Args: []string{"/bin/sh", "-c", script}, Env: env, Dir: "/", Stdout: out, Stderr: out}, native.WithStore(e.Store))
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		why := fmt.Sprintf("apt-get exited with %d", res.ExitCode)
		for _, v := range res.Violations {
			why += "; the network policy blocked " + v.What() + " (" + v.Reason + ")"
		}
		return fault.New(fault.BaseBuild, "installing "+strings.Join(pkgs, " ")+" failed", why,
			"check apt's output: a full disk, a mirror that cannot be reached, or a package the mirror lacks", nil)
	}
	return nil
}

// BuildBase builds a curated base (debian-12) into the store, reporting
// its progress.
func (e *Engine) BuildBase(ctx context.Context, st *store.Store, name, mirror string) (store.Base, error) {
	shift := store.Shift()
	op := "base " + name
	st2 := &stepper{r: e.Report, op: op}
	e.notice("building %s with debootstrap (once; it is kept in the store)", name)
	var log io.Writer
	if e.Report != nil {
		log = e.Report.Output(op)
	}
	b, err := st.BuildCurated(ctx, name, store.BuildOptions{Mirror: mirror, UIDShift: shift, Progress: st2.step, Log: log})
	if e.Report != nil {
		e.Report.Done(op, err)
	}
	if err != nil {
		if errors.Is(err, store.ErrUnknownBase) {
			return b, fault.New(fault.BadValue, err.Error(), "", "use one of: "+strings.Join(store.CuratedNames[:], ", "), err)
		}
		return b, fault.New(fault.BaseBuild, err.Error(), "", "see the message above", err)
	}
	e.notice("%s is %s", name, b.Digest)
	return b, nil
}

// aptSteps passes apt's output on and reports its steps: each package
// fetched, unpacked and set up.
type aptSteps struct {
	w    io.Writer
	s    *stepper
	line []byte
}

func (a *aptSteps) Write(p []byte) (int, error) {
	a.line = append(a.line, p...)
	for {
		i := bytes.IndexByte(a.line, '\n')
		if i < 0 {
			break
		}
		l := string(a.line[:i])
		a.line = a.line[i+1:]
		switch {
		case strings.HasPrefix(l, "Get:"):
			// Get:12 http://mirror bookworm/main amd64 libpq5 amd64 15.8-0+deb12u1 [191 kB]
			// (index files have no architecture field: "bookworm InRelease")
			f := strings.Fields(l)
			switch {
			case len(f) >= 6:
				a.s.step("Retrieving " + f[4])
			case len(f) >= 4:
				a.s.step("Retrieving " + f[3])
			}
		case strings.HasPrefix(l, "Unpacking "), strings.HasPrefix(l, "Setting up "):
			a.s.step(strings.TrimSuffix(strings.Replace(l, "Setting up ", "Setting-up ", 1), " ..."))
		}
	}
	return a.w.Write(p)
}
