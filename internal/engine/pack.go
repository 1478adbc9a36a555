package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/pinfold/pinfold/internal/changeset"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/pack"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/internal/store"
	"github.com/pinfold/pinfold/sandbox"
)

// PackOptions say where a packed image goes and how it runs.
type PackOptions struct {
	Out, Tag, Push string
	// AllowDirty packs a workspace with uncommitted changes or open
	// changesets.
	AllowDirty bool
	Entrypoint []string
	Cmd        []string
	// App writes Out as an app file: an archive with its pinfold.json.
	App bool
	// SignKey signs the image (see pack.Job).
	SignKey string
}

// Packed is what Pack made.
type Packed struct {
	*pack.Result
	System *plan.System
	Epoch  int64
}

// Pack makes the OCI image of p's sandbox: the base as one layer, what
// its capabilities installed as another, the workspace at its path as the
// last (unless its access is none), the plan's environment and working
// directory, and the command. The same sandbox id and workspace content
// give the same image digest.
func (e *Engine) Pack(ctx context.Context, p *plan.Plan, o PackOptions) (*Packed, error) {
	if c := p.Pack; c != nil {
		// The config's pack: section, where the command line says nothing.
		if len(o.Entrypoint) == 0 {
			o.Entrypoint = c.Entrypoint
		}
		if len(o.Cmd) == 0 {
			o.Cmd = c.Cmd
		}
		if o.Tag == "" {
			o.Tag = c.Tag
		}
	}
	ws := p.Sandbox.Workspace
	if p.Sandbox.Access == sandbox.AccessNone {
		ws = "" // --access none: an image of the base alone
	}
	var files []string
	if ws != "" {
		var err error
		if files, err = e.packedFiles(p, ws, o.AllowDirty); err != nil {
			return nil, err
		}
	}
	root, shift, err := e.packRoot(ctx, p)
	if err != nil {
		return nil, err
	}
	st, err := e.OpenStore()
	if err != nil {
		return nil, err
	}
	sys, err := e.Describe(ctx, st, p)
	if err != nil {
		return nil, err
	}
	epoch := packEpoch(ws)
	job := &pack.Job{Epoch: epoch, Out: o.Out, Tag: o.Tag, Push: o.Push, SignKey: o.SignKey, Archive: o.App}
	if o.App {
		job.Meta, _ = json.Marshal(pack.AppMeta{Format: pack.AppFormat, SandboxID: sys.SandboxID, BaseID: sys.BaseID, Tag: o.Tag})
	}
	// Only content ids go in, never host paths other than the workspace's:
	// the same base from another file or store gives the same image.
	base := pack.Layer{Dir: root, UIDShift: shift, Comment: "base " + sys.BaseID}
	if p.Sandbox.Base.Kind == sandbox.BaseDebian12 && len(sys.Capabilities) > 0 {
		// The curated base, then what its capabilities installed, as the
		// image keeps it (overlayfs upper directories beside its rootfs):
		// the base layer is the same for every set of capabilities.
		cb, err := st.CuratedBase(string(p.Sandbox.Base.Kind))
		if err != nil {
			return nil, fault.New(fault.BadBase, err.Error(), "", "pinfold base build debian-12", err)
		}
		store.UseBase(cb.Root)
		base.Dir = cb.Root
		job.Layers = append(job.Layers, base, pack.Layer{Dir: filepath.Join(filepath.Dir(root), "layer"), Overlay: true, UIDShift: shift,
			Comment: "capabilities " + strings.Join(sys.Capabilities, ", ") + " (packages " + strings.Join(sys.Packages, " ") + ")"})
	} else {
		job.Layers = append(job.Layers, base)
	}
	if ws != "" {
		// Times and modes as a checkout of the commit has them, whichever
		// checkout it is.
		job.Layers = append(job.Layers, pack.Layer{Dir: ws, Prefix: ws, Files: files, Comment: "workspace " + ws,
			EpochTimes: true, GitModes: isGit(ws), Parents: base.Dir, ParentsShift: base.UIDShift})
	}
	job.Config = imageConfig(p, &o, ws, sys)
	res, err := pack.Run(ctx, job)
	if err != nil {
		return nil, packFault(err)
	}
	return &Packed{Result: res, System: sys, Epoch: epoch}, nil
}

// packedFiles are the workspace's files an image keeps: those of a clean
// checkout (or any, with allowDirty), without the plan's secrets. A
// workspace where a sandbox mounts its own directories is refused.
func (e *Engine) packedFiles(p *plan.Plan, ws string, allowDirty bool) ([]string, error) {
	// A sandbox mounts its own /tmp, /dev, /proc, /sys and /run over
	// the image's: a workspace packed there would not be found when
	// the image runs in pinfold.
	for _, d := range []string{"/tmp", "/dev", "/proc", "/sys", "/run"} {
		if ws == d || strings.HasPrefix(ws, d+"/") {
			return nil, fault.New(fault.PackFailed, "the workspace "+ws+" is under "+d+", which a sandbox covers with its own",
				"the image would keep the workspace at "+ws+", where pinfold run APP or --base oci: finds the sandbox's "+d+" instead",
				"move the project out of "+d+" (like ~/src/project) and pack it there, or pack --access none for an image of the base alone", nil)
		}
	}
	if err := e.checkClean(ws, allowDirty); err != nil {
		return nil, err
	}
	files, err := workspaceFiles(ws)
	if err != nil {
		return nil, fault.New(fault.PackFailed, "listing the workspace's files: "+err.Error(), "", "", err)
	}
	return withoutSecrets(ws, files, p.Secrets)
}

// imageConfig is the packed image's config: the plan's environment
// without the host's values and secrets, the entrypoint, the working
// directory, and labels naming the sandbox, base, workspace and
// capabilities.
func imageConfig(p *plan.Plan, o *PackOptions, ws string, sys *plan.System) pack.Config {
	var c pack.Config
	for _, v := range p.Command.Env {
		// Not the host's values, nor where a secret file is mounted (the
		// image does not have it).
		if (v.From == plan.FromDefault && v.Name != "PATH") || strings.HasPrefix(v.From, plan.FromHost) || v.Secret ||
			strings.Contains(v.From, "(secret ") {
			continue
		}
		c.Env = append(c.Env, v.Name+"="+v.Value)
	}
	slices.Sort(c.Env)
	c.Entrypoint, c.Cmd = o.Entrypoint, o.Cmd
	c.WorkingDir = p.Command.Dir
	if c.WorkingDir == "" {
		c.WorkingDir = ws
	}
	c.Labels = map[string]string{}
	if sys.SandboxID != "" {
		c.Labels[pack.LabelSandboxID] = sys.SandboxID
	}
	if sys.BaseID != "" {
		c.Labels[pack.LabelBaseID] = sys.BaseID
	}
	if ws != "" {
		c.Labels[pack.LabelWorkspace] = ws
	}
	if len(sys.Capabilities) > 0 {
		c.Labels[pack.LabelCaps] = strings.Join(sys.Capabilities, ",")
	}
	return c
}

// packFault is a failed pack, with the fix for the stage that failed.
func packFault(err error) error {
	fix := "see the message"
	var pe *pack.Error
	switch {
	case errors.Is(err, pack.ErrNoHelper):
		fix = "install pinfold-pack beside pinfold (scripts/setup.sh --all does), or set PINFOLD_PACK_HELPER to its path"
	case errors.As(err, &pe) && pe.Stage == pack.StageOut:
		fix = "check the --out path: its directory must exist and be writable, a directory must be new or empty, and only an archive (FILE.tar) holds a signature"
	case errors.As(err, &pe) && pe.Stage == pack.StagePush:
		fix = "check the --push reference (HOST[:PORT]/REPO[:TAG]), that the registry is reachable, and its credentials (docker login)"
	case errors.As(err, &pe) && pe.Stage == pack.StageKey:
		fix = "give --sign-key an unencrypted PEM private key (see docs/pack.md#signing)"
	case errors.As(err, &pe) && pe.Stage == pack.StageLayers:
		fix = "check that the files can be read and do not change while they are packed"
	}
	return fault.New(fault.PackFailed, "packing the image: "+err.Error(), "", fix, err)
}

// packRoot returns the directory of p's root file system and the host id
// its owner 0 was shifted to.
func (e *Engine) packRoot(ctx context.Context, p *plan.Plan) (string, uint32, error) {
	b := p.Sandbox.Base
	shift := store.Shift()
	switch b.Kind {
	case sandbox.BaseHost, "":
		return "", 0, fault.New(fault.PackBase, "the host base cannot be packed",
			"base host is a view of this machine's /usr and /etc, not an image", "choose a base: --base debian-12, dir:PATH, tar:PATH or oci:IMAGE", nil)
	case sandbox.BaseDir:
		// Its owners are the host's: every one becomes 0.
		return b.Path, 0, nil
	case sandbox.BaseDebian12:
		// Built if need be; with capabilities, their image's root.
		nb, err := e.ensureSystem(ctx, p)
		if err != nil {
			return "", 0, err
		}
		if nb.Kind == sandbox.BaseDir {
			return nb.Path, shift, nil
		}
		st, err := e.OpenStore()
		if err != nil {
			return "", 0, err
		}
		cb, err := st.CuratedBase(string(b.Kind))
		if err != nil {
			return "", 0, fault.New(fault.BadBase, err.Error(), "", "pinfold base build debian-12", err)
		}
		store.UseBase(cb.Root)
		return cb.Root, shift, nil
	}
	st, err := e.OpenStore()
	if err != nil {
		return "", 0, err
	}
	opt := store.ImportOptions{UIDShift: shift}
	var sb store.Base
	switch {
	case b.Kind == sandbox.BaseTar:
		sb, err = st.TarBase(ctx, b.Path, opt)
	case b.Path == "":
		sb, err = st.PullBase(ctx, b.Ref, opt, false)
	default:
		sb, err = st.OCIBase(ctx, b.Path, b.Ref, opt)
	}
	if err != nil {
		return "", 0, fault.New(fault.BadBase, err.Error(), "", "check the --base", err)
	}
	store.UseBase(sb.Root)
	return sb.Root, shift, nil
}

// checkClean refuses a workspace with uncommitted git changes (untracked
// files that git does not ignore included) or open changesets.
func (e *Engine) checkClean(ws string, allow bool) error {
	if allow {
		return nil
	}
	if isGit(ws) {
		out, err := git(ws, "status", "--porcelain", "--untracked-files=normal")
		if err != nil {
			return fault.New(fault.PackFailed, "git status failed in "+ws+": "+err.Error(), "", "", err)
		}
		if len(out) > 0 {
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			more := ""
			if len(lines) > 5 {
				more = " and " + strconv.Itoa(len(lines)-5) + " more"
				lines = lines[:5]
			}
			return fault.New(fault.PackDirty, "the workspace "+ws+" has uncommitted changes",
				"git status: "+strings.Join(lines, "; ")+more, "commit them (or pass --allow-dirty to pack them as they are)", nil)
		}
	}
	if e.Store != "" {
		all, _ := changeset.List(e.Store)
		var open []string
		for _, c := range all {
			if c.Meta.Workspace == ws && (c.Meta.Status == changeset.StatusOpen || c.Meta.Status == changeset.StatusRunning) {
				open = append(open, c.Meta.ID)
			}
		}
		if len(open) > 0 {
			return fault.New(fault.PackDirty, "the workspace "+ws+" has open changesets: "+strings.Join(open, ", "),
				"an image packed now would leave their writes out", "apply or discard them (pinfold changes), or pass --allow-dirty", nil)
		}
	}
	return nil
}

// workspaceFiles lists what of ws goes into an image: in a git work tree
// the files git tracks or would track (not the ignored ones), else
// everything but .git.
func workspaceFiles(ws string) ([]string, error) {
	if isGit(ws) {
		out, err := git(ws, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
		if err != nil {
			return nil, err
		}
		files := []string{}
		for f := range strings.SplitSeq(string(out), "\x00") {
			// Deleted but not committed files are listed yet absent.
			if f != "" && exists(filepath.Join(ws, f)) {
				files = append(files, f)
			}
		}
		return files, nil
	}
	files := []string{}
	err := filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == ws {
			return nil
		}
		if d.Name() == ".git" && d.IsDir() {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(ws, p)
		files = append(files, rel)
		return nil
	})
	return files, err
}

// withoutSecrets leaves out of files (relative to ws) every file a
// secret of the plan names, and what is below it, and any other name of
// the same file (a hard link), and the file at the path a run mounts the
// secret on, if that is in the workspace. A secret file git tracks
// refuses the pack: the commit holds it, and an image of the commit
// would too.
func withoutSecrets(ws string, files []string, secrets []plan.Secret) ([]string, error) {
	if len(secrets) == 0 {
		return files, nil
	}
	roots := []string{ws}
	if r, err := filepath.EvalSymlinks(ws); err == nil && r != ws {
		roots = append(roots, r)
	}
	below := func(n string) (string, bool) {
		for _, root := range roots {
			if rel, err := filepath.Rel(root, n); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
				return rel, true
			}
		}
		return "", false
	}
	var rels []string    // secret files' paths below ws
	var targets []string // where runs mount secrets, below ws
	type ino struct{ dev, ino uint64 }
	inodes := map[ino]string{}
	for _, s := range secrets {
		if rel, ok := below(filepath.Clean(s.Target)); ok {
			targets = append(targets, rel)
		}
		names := []string{filepath.Clean(s.Source)}
		if r, err := filepath.EvalSymlinks(s.Source); err == nil {
			names = append(names, r)
		}
		for _, n := range names {
			if rel, ok := below(n); ok {
				rels = append(rels, rel)
			}
		}
		var st syscall.Stat_t
		if err := syscall.Stat(s.Source, &st); err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFREG {
			inodes[ino{uint64(st.Dev), st.Ino}] = s.Name
		}
	}
	secret := func(f string) bool {
		for _, r := range rels {
			if r == "." || f == r || strings.HasPrefix(f, r+"/") {
				return true
			}
		}
		var st syscall.Stat_t
		if len(inodes) > 0 && syscall.Lstat(filepath.Join(ws, f), &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFREG {
			if _, ok := inodes[ino{uint64(st.Dev), st.Ino}]; ok {
				return true
			}
		}
		return false
	}
	if isGit(ws) {
		out, err := git(ws, "ls-files", "-z", "--cached")
		if err != nil {
			return nil, fault.New(fault.PackFailed, "listing the workspace's files: "+err.Error(), "", "", err)
		}
		for f := range strings.SplitSeq(string(out), "\x00") {
			if f != "" && secret(f) {
				return nil, fault.New(fault.PackSecret, "the secret file "+filepath.Join(ws, f)+" is committed in the workspace, and an image of it would hold it",
					"a file a secret names never goes into an image", "remove it from git (git rm --cached "+f+", and ignore it), commit, and pack again", nil)
			}
		}
	}
	kept := files[:0:0]
	for _, f := range files {
		if !secret(f) && !slices.ContainsFunc(targets, func(t string) bool { return t == "." || f == t || strings.HasPrefix(f, t+"/") }) {
			kept = append(kept, f)
		}
	}
	return kept, nil
}

// packEpoch is the time an image's files are clamped to:
// SOURCE_DATE_EPOCH, else the workspace's last commit, else 0.
func packEpoch(ws string) int64 {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 {
			return n
		}
	}
	if ws != "" && isGit(ws) {
		if out, err := git(ws, "log", "-1", "--format=%ct"); err == nil {
			if n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil {
				return n
			}
		}
	}
	return 0
}

func isGit(ws string) bool {
	if _, err := exec.LookPath("git"); err != nil {
		return false
	}
	out, err := git(ws, "rev-parse", "--show-toplevel")
	return err == nil && len(bytes.TrimSpace(out)) > 0
}

func git(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return nil, errors.New(strings.TrimSpace(errb.String()))
	}
	return out, nil
}
