package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pinfold/pinfold/internal/capability"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/internal/store"
	"github.com/pinfold/pinfold/sandbox"
)

// system is what a plan's sandbox is made of: its base, its capabilities
// and why each is there, its sandbox id, and the image when there is one.
type system struct {
	baseName string // debian-12, tar:..., host...
	baseID   string // "" when the base is not in the store yet
	caps     []string
	findings []capability.Finding
	id       string
	image    *store.ImageInfo
	packages []string
}

// baseName is how a plan's base is written.
func baseName(b sandbox.Base) string {
	if b.Path == "" {
		return string(b.Kind)
	}
	s := string(b.Kind) + ":" + b.Path
	if b.Ref != "" {
		s += ":" + b.Ref
	}
	return s
}

// describe works out the plan's system without building anything.
func describe(ctx context.Context, st *store.Store, p *plan.Plan) (*system, error) {
	sp := &p.Sandbox
	sys := &system{baseName: baseName(sp.Base)}
	var root string
	switch sp.Base.Kind {
	case sandbox.BaseHost:
		sys.baseID = "host"
	case sandbox.BaseDir:
		sys.baseID = "dir:" + sp.Base.Path
		root = sp.Base.Path
	case sandbox.BaseDebian12:
		if b, err := st.CuratedBase(string(sp.Base.Kind)); err == nil {
			sys.baseID, root = b.Digest, b.Root
		}
	case sandbox.BaseTar, sandbox.BaseOCI:
		if st != nil {
			id, err := st.BaseID(ctx, string(sp.Base.Kind), sp.Base.Path, sp.Base.Ref)
			if err != nil {
				return sys, fault.New(fault.BadBase, err.Error(), "", "check the --base path", err)
			}
			sys.baseID = id
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
	sys.caps, sys.findings = capability.Merge(p.Capabilities, inferred, p.Auto && curated)
	if len(sys.caps) > 0 && !curated {
		return sys, fault.New(fault.CapUnavailable,
			fmt.Sprintf("capabilities %s need a base pinfold builds: the %s base has what it has", strings.Join(sys.caps, ", "), sys.baseName),
			"", "use --base debian-12 (or drop capabilities from the config)", nil)
	}
	for _, c := range sys.caps {
		pkgs, err := capability.Packages(c, capability.Base(sp.Base.Kind), true)
		if err != nil {
			code := fault.CapUnavailable
			if errors.Is(err, capability.ErrUnknown) {
				code = fault.CapUnknown
			}
			return sys, fault.New(code, err.Error(), "", "pinfold capability list shows the catalog", err)
		}
		sys.packages = append(sys.packages, pkgs...)
	}
	if sys.baseID != "" {
		sys.id = store.SandboxID(sys.baseID, sys.caps, []string{"profile=" + p.Audit.Profile})
		if len(sys.caps) > 0 {
			if img, err := st.Image(sys.id); err == nil {
				sys.image = &img
			} else if errors.Is(err, store.ErrFormat) {
				return sys, fault.New(fault.FormatMismatch, err.Error(), "", "run pinfold gc, then run again", err)
			}
		}
	}
	return sys, nil
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

// ensureImage puts the plan's capabilities in place: the image named by
// the sandbox id is built once (packages installed with the base's
// package manager in a sandbox whose network reaches only the mirror),
// and the plan runs on it.
func ensureImage(ctx context.Context, io *IO, p *plan.Plan, frozen bool) error {
	if p.Sandbox.Base.Kind != sandbox.BaseDebian12 {
		if len(p.Capabilities) > 0 {
			_, err := describe(ctx, nil, p)
			return err
		}
		return nil
	}
	st, err := openStore()
	if err != nil {
		return err
	}
	sys, err := describe(ctx, st, p)
	if err != nil || len(sys.caps) == 0 {
		return err
	}
	if frozen {
		for _, f := range sys.findings {
			if f.Source != capability.Explicit && f.Capability != "" && !slices.Contains(p.Capabilities, f.Capability) {
				return fault.New(fault.CapUnknown, "capability "+f.Capability+" is needed but not in the config ("+string(f.Source)+": "+f.Evidence+")",
					"the config is frozen here (CI=true or --frozen): pinfold does not add capabilities on its own",
					"add it: capabilities: ["+f.Capability+"] in pinfold.yaml (pinfold capability add "+f.Capability+")", nil)
			}
		}
	}
	if sys.image == nil {
		base, err := st.CuratedBase(string(p.Sandbox.Base.Kind))
		if err != nil {
			return fault.New(fault.BadBase, err.Error(), "", "pinfold base build debian-12", err)
		}
		fmt.Fprintf(io.Stderr, "pinfold: adding %s to %s (once; image %s)\n", strings.Join(sys.caps, ", "), sys.baseName, short(sys.id))
		img, err := st.BuildImage(ctx, store.ImageInfo{ID: sys.id, Capabilities: sys.caps, Packages: sys.packages, Version: Version},
			base, func(ctx context.Context, writes string) error {
				return installPackages(ctx, io, base, writes, sys.packages)
			})
		if err != nil {
			var fe *fault.Error
			if errors.As(err, &fe) {
				return err
			}
			return fault.New(fault.BaseBuild, "building the image: "+err.Error(), "", "check the mirror and the disk, then run again", err)
		}
		sys.image = &img
	}
	// Marked in use until this process exits: gc and rm leave it alone.
	store.UseBase(sys.image.Root)
	p.Sandbox.Base = sandbox.Base{Kind: sandbox.BaseDir, Path: sys.image.Root}
	return nil
}

// installPackages runs apt-get in a sandbox of base whose writes land in
// writes, with the network allowed to the mirror's host only.
func installPackages(ctx context.Context, io *IO, base store.Base, writes string, pkgs []string) error {
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
	out := &prefixWriter{w: io.Stderr, prefix: "  | "}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	res, err := sandbox.Run(ctx, spec, &sandbox.Cmd{Args: []string{"/bin/sh", "-c", script}, Env: env, Dir: "/", Stdout: out, Stderr: out})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		why := fmt.Sprintf("apt-get exited with %d", res.ExitCode)
		for _, v := range res.Violations {
			why += "; the network policy blocked " + v.What() + " (" + v.Reason + ")"
		}
		return fault.New(fault.BaseBuild, "installing "+strings.Join(pkgs, " ")+" failed", why,
			"check the output above: a full disk, a mirror that cannot be reached, or a package the mirror lacks", nil)
	}
	return nil
}

// prefixWriter indents a child's output under pinfold's.
type prefixWriter struct {
	w      io.Writer
	prefix string
	mid    bool
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		if !p.mid {
			p.w.Write([]byte(p.prefix))
			p.mid = true
		}
		i := strings.IndexByte(string(b), '\n')
		if i < 0 {
			p.w.Write(b)
			break
		}
		p.w.Write(b[:i+1])
		b = b[i+1:]
		p.mid = false
	}
	return n, nil
}

func short(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// explainMain prints what a run's sandbox is made of.
func explainMain(ctx context.Context, io *IO, args []string) int {
	var o runOptions
	fs := runFlags("explain", &o)
	rest, err := fs.Parse(args)
	if err != nil {
		return fail(io, err)
	}
	if fs.help {
		fmt.Fprint(io.Stdout, "Usage: pinfold explain [flags] [-- CMD [ARGS...]]\n\nPrints the base, the capabilities with where each comes from (explicit,\nlockfile, ELF scan), and the sandbox id of the run the same flags and\ncommand would make. Nothing is built.\n\nFlags:\n")
		fs.Usage(io.Stdout)
		return 0
	}
	if len(rest) == 0 {
		rest = []string{"true"}
	}
	p, err := resolve(ctx, &o, rest)
	if err != nil {
		return fail(io, classify(err, nil))
	}
	st, err := openStore()
	if err != nil {
		return fail(io, err)
	}
	sys, err := describe(ctx, st, p)
	if err != nil {
		return fail(io, err)
	}
	w := io.Stdout
	baseID := sys.baseID
	if baseID == "" {
		baseID = "(not in the store yet: the first run builds or imports it)"
	}
	fmt.Fprintf(w, "base:          %s  %s\n", sys.baseName, baseID)
	if len(sys.findings) == 0 {
		fmt.Fprintf(w, "capabilities:  none\n")
	} else {
		fmt.Fprintf(w, "capabilities:\n")
		for _, f := range sys.findings {
			name := f.Capability
			if name == "" {
				name = "(none provides it)"
			}
			if f.Source == capability.Explicit {
				fmt.Fprintf(w, "  %-14s explicit: %s\n", name, p.Sources["capabilities"])
				continue
			}
			fmt.Fprintf(w, "  %-14s %s: %s\n", name, f.Source, f.Evidence)
		}
	}
	if len(sys.packages) > 0 {
		fmt.Fprintf(w, "packages:      %s\n", strings.Join(sys.packages, " "))
	}
	switch {
	case sys.id == "":
		fmt.Fprintf(w, "sandbox id:    (known once the base is in the store)\n")
	case sys.image != nil:
		fmt.Fprintf(w, "sandbox id:    %s (image built %s)\n", sys.id, sys.image.Created)
	case len(sys.caps) > 0:
		fmt.Fprintf(w, "sandbox id:    %s (image not built yet: the first run builds it)\n", sys.id)
	default:
		fmt.Fprintf(w, "sandbox id:    %s\n", sys.id)
	}
	return 0
}

// imagesMain lists the derived images.
func imagesMain(ctx context.Context, io *IO, args []string) int {
	st, err := openStore()
	if err != nil {
		return fail(io, err)
	}
	imgs, err := st.Images()
	if err != nil {
		return fail(io, fault.New(fault.Store, err.Error(), "", "", err))
	}
	tw := tabwriter.NewWriter(io.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SANDBOX ID\tBASE\tCAPABILITIES\tCREATED")
	for _, m := range imgs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", short(m.ID), short(m.Base), strings.Join(m.Capabilities, ","), m.Created)
	}
	tw.Flush()
	return 0
}

// tailBuffer passes a stream on and keeps its last 64 KiB.
type tailBuffer struct {
	w io.Writer
	b []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	const max = 64 << 10
	t.b = append(t.b, p...)
	if len(t.b) > max {
		t.b = append(t.b[:0], t.b[len(t.b)-max:]...)
	}
	return t.w.Write(p)
}

// suggestCapabilities turns loader errors in a failed run's output into
// the capability that fixes them.
func suggestCapabilities(io *IO, out []byte) {
	seen := map[string]bool{}
	for _, f := range capability.FromOutput(out) {
		if seen[f.Evidence] {
			continue
		}
		seen[f.Evidence] = true
		if f.Capability == "" {
			fmt.Fprintf(io.Stderr, "pinfold: %s %s\n  Why: a system library the command needs is not in the sandbox, and no capability provides it\n  Fix: use a base that has it, or mount it in\n",
				fault.MissingLibrary, f.Evidence)
			continue
		}
		fmt.Fprintf(io.Stderr, "pinfold: %s %s\n  Why: a system library the command needs is not in the sandbox\n  Fix: add the capability that provides it: capabilities: [%s] in pinfold.yaml (with base: debian-12)\n",
			fault.MissingLibrary, f.Evidence, f.Capability)
	}
}
