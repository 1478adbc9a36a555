package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/pinfold/pinfold/internal/changeset"
	"github.com/pinfold/pinfold/internal/config"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/internal/store"
	"github.com/pinfold/pinfold/internal/units"
	"github.com/pinfold/pinfold/sandbox"
)

// storeDir is pinfold's store, for changesets.
func storeDir() (string, error) {
	d, err := store.DefaultDir()
	if err != nil {
		return "", fault.New(fault.Store, "cannot find pinfold's store", err.Error(), "set PINFOLD_STORE", err)
	}
	return d, nil
}

// dropChangeset removes an applied or discarded changeset: out of the
// store at once, its files deleted by a detached pinfold so that the user
// does not wait for the file system (deleting many files that were written
// out takes long, the more so with online discard).
func dropChangeset(cs *changeset.Changeset) error {
	if err := cs.Trash(); err != nil {
		return cs.Remove()
	}
	exe, err := os.Executable()
	if err != nil || filepath.Base(exe) != "pinfold" {
		// Not the pinfold binary (a test, a renamed copy): delete here.
		_, err := changeset.EmptyTrash(filepath.Dir(filepath.Dir(cs.Dir)))
		return err
	}
	cmd := exec.Command(exe, "clean", "--trash")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if cmd.Start() == nil {
		cmd.Process.Release()
	}
	return nil // what remains, pinfold clean deletes
}

// useAllCPUs lifts main's one-P setting for commands that read many
// files: the changeset code reads and compares them on several threads.
// These commands are short and their memory is bounded by the changeset:
// collecting garbage less often is cheaper than touching fresh pages.
func useAllCPUs() {
	if n := runtime.NumCPU(); n > 1 {
		runtime.GOMAXPROCS(n)
	}
	debug.SetGCPercent(400)
}

// applyingDir holds a marker per apply in progress, so that every command
// can find an interrupted one with a single directory read.
func applyingDir(dir string) string { return filepath.Join(dir, "applying") }

// recoverApplies finishes applies that a killed pinfold left half done
// (and first takes over the disks of its runs, see recoverDisks).
func recoverApplies(ctx context.Context, io *IO) error {
	dir, err := store.DefaultDir()
	if err != nil {
		return nil
	}
	if err := recoverDisks(ctx, io, dir); err != nil {
		return err
	}
	ents, err := os.ReadDir(applyingDir(dir))
	if err != nil || len(ents) == 0 {
		return nil
	}
	for _, e := range ents {
		cs, err := changeset.Open(dir, e.Name())
		if err != nil {
			os.Remove(filepath.Join(applyingDir(dir), e.Name()))
			continue
		}
		unlock, err := cs.Lock()
		if err != nil {
			continue // another pinfold is applying it right now
		}
		marker := filepath.Join(applyingDir(dir), e.Name())
		if _, jerr := os.Stat(filepath.Join(cs.Dir, "apply.json")); jerr != nil {
			// Killed before it wrote anything: the changeset is intact.
			os.Remove(marker)
			unlock()
			continue
		}
		err = changeset.Recover(ctx, cs.Dir, cs.Roots())
		if err == nil {
			fmt.Fprintf(io.Stderr, "pinfold: finished applying changeset %s (interrupted earlier)\n", cs.Meta.ID)
			// A partial apply (PATHS) leaves the changeset open.
			if b, _ := os.ReadFile(marker); string(b) != "partial" {
				err = dropChangeset(cs)
			}
			os.Remove(marker)
		}
		unlock()
		if err != nil {
			return fault.New(fault.ApplyFailed, "cannot finish the interrupted apply of changeset "+cs.Meta.ID,
				err.Error(), "free what the error names, then run any pinfold command again", err)
		}
	}
	return nil
}

// startChangeset creates (or, with --changeset, reopens) the changeset a
// run writes to, and points the sandbox at it.
func startChangeset(p *plan.Plan) (*changeset.Changeset, func(), error) {
	sp := &p.Sandbox
	if sp.Access != sandbox.AccessChangeset && len(p.Captures) == 0 {
		return nil, func() {}, nil
	}
	dir, err := storeDir()
	if err != nil {
		return nil, nil, err
	}
	var paths []string
	if sp.Access == sandbox.AccessChangeset {
		paths = append(paths, sp.Workspace)
	}
	paths = append(paths, p.Captures...)
	var cs *changeset.Changeset
	if p.Changeset != "" {
		if cs, err = openChangeset(dir, p.Changeset, ""); err != nil {
			return nil, nil, err
		}
		if len(cs.Meta.Roots) != len(paths) || cs.Meta.Roots[0].Path != paths[0] {
			return nil, nil, fault.New(fault.BadValue, "changeset "+cs.Meta.ID+" captured other directories",
				"it holds "+rootPaths(cs)+"; this run captures "+strings.Join(paths, ", "),
				"run in the same workspace with the same --capture, or start a new changeset", nil)
		}
	} else if cs, err = changeset.Create(dir, sp.Workspace, paths, p.Command.Args); err != nil {
		return nil, nil, fault.New(fault.Store, "cannot create a changeset", err.Error(), "check pinfold's store (pinfold doctor)", err)
	}
	unlock, err := cs.Lock()
	if err != nil {
		return nil, nil, fault.New(fault.Busy, "changeset "+cs.Meta.ID+" is in use", err.Error(),
			"wait for the other pinfold to finish", err)
	}
	if p.Changeset != "" {
		cs.Meta.Status = changeset.StatusRunning // Create sets it for new ones
		if err := cs.Save(); err != nil {
			unlock()
			return nil, nil, err
		}
	}
	roots := cs.Roots()
	captured := func(r changeset.Root) *sandbox.Capture {
		return &sandbox.Capture{Path: r.Lower, Upper: r.Upper, Work: filepath.Join(filepath.Dir(r.Upper), "work")}
	}
	i := 0
	if sp.Access == sandbox.AccessChangeset {
		sp.Changeset = captured(roots[0])
		i = 1
	}
	for ; i < len(roots); i++ {
		sp.Captures = append(sp.Captures, *captured(roots[i]))
	}
	return cs, unlock, nil
}

func rootPaths(cs *changeset.Changeset) string {
	var ps []string
	for _, r := range cs.Meta.Roots {
		ps = append(ps, r.Path)
	}
	return strings.Join(ps, ", ")
}

// finishChangeset records what the run changed, applies it with --apply
// when the command succeeded, and tells the user what to do with it.
func finishChangeset(ctx context.Context, io *IO, cs *changeset.Changeset, p *plan.Plan, res *sandbox.Result, quiet bool) error {
	roots := cs.Roots()
	reused := p.Changeset != ""
	if !reused && emptyUppers(roots) {
		return cs.Remove() // most runs: nothing written
	}
	useAllCPUs()
	entries, err := changeset.Scan(ctx, roots)
	if err != nil {
		return fault.New(fault.Store, "cannot read changeset "+cs.Meta.ID, err.Error(), "", err)
	}
	if len(entries) == 0 && !reused {
		return cs.Remove()
	}
	fp, err := changeset.Fingerprint(roots, entries)
	if err != nil {
		return fault.New(fault.Store, "cannot fingerprint changeset "+cs.Meta.ID, err.Error(), "", err)
	}
	if reused {
		// A rerun keeps what the originals looked like when first captured.
		old, err := cs.Fingerprints()
		if err != nil {
			return fault.New(fault.Store, "cannot read changeset "+cs.Meta.ID, err.Error(), "", err)
		}
		for k, v := range old {
			fp[k] = v
		}
	}
	if err := cs.SaveFingerprints(fp); err != nil {
		return fault.New(fault.Store, "cannot save changeset "+cs.Meta.ID, err.Error(), "", err)
	}
	n := changeset.Count(entries)
	cs.Meta.Status, cs.Meta.ExitCode, cs.Meta.Finished, cs.Meta.Counts = "open", res.ExitCode, time.Now(), &n
	if err := cs.Save(); err != nil {
		return err
	}
	counts := fmt.Sprintf("%d added, %d modified, %d deleted", n.Added, n.Modified, n.Deleted)
	capHit := slices.Contains(res.LimitsHit, limitDisk)
	if capHit {
		// Said first, and in the summary: what is kept is incomplete.
		counts += fmt.Sprintf("; the run hit its disk cap (--disk %s): writes past it failed with \"no space left on device\"",
			units.FormatSize(p.Disk))
	}
	if p.Apply && res.ExitCode == 0 && capHit && !quiet {
		fmt.Fprintf(io.Stderr, "pinfold: not applying: some writes failed at the disk cap\n")
	}
	if p.Apply && res.ExitCode == 0 && !capHit {
		if _, err := applyChangeset(ctx, cs, nil, false); err != nil {
			return err
		}
		if !quiet {
			fmt.Fprintf(io.Stderr, "pinfold: applied %s\n", counts)
		}
		return nil
	}
	if !quiet {
		id := cs.Meta.ID
		fmt.Fprintf(io.Stderr, "pinfold: changeset %s: %s; review: pinfold diff %s; apply: pinfold apply %s; discard: pinfold discard %s\n",
			id, counts, id, id, id)
	}
	return nil
}

// emptyUppers reports whether no root's upper directory holds anything.
func emptyUppers(roots []changeset.Root) bool {
	for _, r := range roots {
		f, err := os.Open(r.Upper)
		if err != nil {
			return false
		}
		names, _ := f.Readdirnames(1)
		f.Close()
		if len(names) > 0 {
			return false
		}
	}
	return true
}

// applyChangeset applies cs (only paths, when given), journaled.
func applyChangeset(ctx context.Context, cs *changeset.Changeset, paths []string, force bool) (changeset.ApplyResult, error) {
	roots := cs.Roots()
	entries, err := changeset.Scan(ctx, roots)
	if err != nil {
		return changeset.ApplyResult{}, fault.New(fault.Store, "cannot read changeset "+cs.Meta.ID, err.Error(), "", err)
	}
	var owner *changeset.Owner
	if os.Geteuid() == 0 {
		var st syscall.Stat_t
		if err := syscall.Stat(roots[0].Lower, &st); err == nil {
			owner = &changeset.Owner{UID: st.Uid, GID: st.Gid}
		}
	}
	dir := filepath.Dir(filepath.Dir(cs.Dir)) // the store
	marker := filepath.Join(applyingDir(dir), cs.Meta.ID)
	os.MkdirAll(applyingDir(dir), 0o700)
	mode := "all"
	if len(paths) > 0 {
		mode = "partial"
	}
	if err := os.WriteFile(marker, []byte(mode), 0o600); err != nil {
		return changeset.ApplyResult{}, fault.New(fault.Store, "cannot record the apply of changeset "+cs.Meta.ID, err.Error(), "", err)
	}
	fp, err := cs.Fingerprints()
	if err != nil {
		return changeset.ApplyResult{}, fault.New(fault.Store, "cannot read changeset "+cs.Meta.ID, err.Error(), "", err)
	}
	res, err := changeset.Apply(ctx, cs.Dir, roots, entries, changeset.ApplyOptions{Paths: paths, Force: force,
		Owner: owner, Fingerprints: fp})
	if err != nil {
		if errors.Is(err, changeset.ErrConflict) {
			os.Remove(marker)
			var b strings.Builder
			for _, c := range res.Conflicts {
				fmt.Fprintf(&b, "\n    %s: %s", c.Path, c.Why)
			}
			return res, fault.New(fault.Conflict, fmt.Sprintf("changeset %s conflicts with the workspace (%d files)",
				cs.Meta.ID, len(res.Conflicts)), "these originals changed since the run:"+b.String(),
				"review them (pinfold diff "+cs.Meta.ID+"), then apply with --force to overwrite them", err)
		}
		if errors.Is(err, changeset.ErrUnsafe) {
			os.Remove(marker)
			return res, fault.New(fault.ApplyFailed, "refusing to apply changeset "+cs.Meta.ID, err.Error(),
				"discard it, or apply only other paths", err)
		}
		return res, fault.New(fault.ApplyFailed, "applying changeset "+cs.Meta.ID+" stopped", err.Error(),
			"every file is either as before or fully applied; fix the cause (e.g. free space), then run pinfold apply "+
				cs.Meta.ID+" again", err)
	}
	os.Remove(marker)
	if len(paths) == 0 {
		return res, dropChangeset(cs)
	}
	// What is left to apply, for pinfold changes.
	if left, err := changeset.Scan(ctx, roots); err == nil {
		n := changeset.Count(left)
		cs.Meta.Counts = &n
		cs.Save()
	}
	return res, nil
}

// openChangeset finds the changeset to act on: idOrPrefix, or the newest
// open one of the workspace.
func openChangeset(dir, idOrPrefix, workspace string) (*changeset.Changeset, error) {
	var cs *changeset.Changeset
	var err error
	if idOrPrefix != "" {
		cs, err = changeset.Open(dir, idOrPrefix)
	} else {
		cs, err = changeset.Latest(dir, workspace)
	}
	if err != nil {
		what := "no changeset " + idOrPrefix
		if idOrPrefix == "" {
			what = "no open changeset for " + workspace
		}
		return nil, fault.New(fault.NoChangeset, what, err.Error(), "list them with pinfold changes", err)
	}
	return cs, nil
}

// changesetAndPaths splits [ID] [PATHS...] (the first argument is an id
// when it names a changeset) and opens the changeset: that one, or the
// newest open one of the workspace.
func changesetAndPaths(dir string, args []string) (*changeset.Changeset, []string, error) {
	if len(args) > 0 && isHexPrefix(args[0]) {
		if cs, err := changeset.Open(dir, args[0]); err == nil {
			return cs, args[1:], nil
		}
	}
	cs, err := openChangeset(dir, "", currentWorkspace())
	return cs, args, err
}

func isHexPrefix(s string) bool {
	if len(s) < 4 || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func currentWorkspace() string {
	cwd, _ := os.Getwd()
	if real, err := filepath.EvalSymlinks(cwd); err == nil {
		cwd = real
	}
	// The workspace is where pinfold.yaml is, else the current directory.
	if cfg, err := findConfig(cwd); err == nil && cfg != "" {
		return filepath.Dir(cfg)
	}
	return cwd
}

// relPaths makes PATHS relative to the changeset's first root.
func relPaths(cs *changeset.Changeset, paths []string) []string {
	if len(paths) == 0 || len(cs.Meta.Roots) == 0 {
		return paths
	}
	cwd, _ := os.Getwd()
	if real, err := filepath.EvalSymlinks(cwd); err == nil {
		cwd = real
	}
	root := cs.Meta.Roots[0].Path
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		abs := p
		if !filepath.IsAbs(abs) {
			abs = filepath.Join(cwd, p)
		}
		if rel, err := filepath.Rel(root, abs); err == nil && !strings.HasPrefix(rel, "..") {
			p = rel
		}
		out = append(out, filepath.ToSlash(p))
	}
	return out
}

func changesMain(ctx context.Context, io *IO, args []string) int {
	useAllCPUs()
	var all, asJSON bool
	fs := newFlagSet("changes")
	fs.Bool(&all, "all", 'a', "list the changesets of every workspace")
	fs.Bool(&asJSON, "json", 0, "print JSON")
	rest, err := fs.ParseAll(args)
	if err != nil {
		return fail(io, err)
	}
	if fs.help {
		fmt.Fprint(io.Stdout, "Usage: pinfold changes [--all] [--json]\n\nLists the changesets of this workspace (newest first): id, status, when, what they\nchange, and the command that made them.\n\nFlags:\n")
		fs.Usage(io.Stdout)
		return 0
	}
	if len(rest) > 0 {
		return fail(io, fs.errorf("pinfold changes takes no arguments"))
	}
	if err := recoverApplies(ctx, io); err != nil {
		return fail(io, err)
	}
	dir, err := storeDir()
	if err != nil {
		return fail(io, err)
	}
	list, err := changeset.List(dir)
	if err != nil {
		return fail(io, fault.New(fault.Store, "cannot list changesets", err.Error(), "", err))
	}
	ws := currentWorkspace()
	type row struct {
		ID        string   `json:"id"`
		Status    string   `json:"status"`
		Created   string   `json:"created"`
		Workspace string   `json:"workspace"`
		Roots     []string `json:"roots"`
		Command   []string `json:"command"`
		Added     int      `json:"added"`
		Modified  int      `json:"modified"`
		Deleted   int      `json:"deleted"`
		ExitCode  int      `json:"exit_code"`
	}
	rows := []row{}
	for _, cs := range list {
		if !all && cs.Meta.Workspace != ws {
			continue
		}
		r := row{ID: cs.Meta.ID, Status: cs.Meta.Status, Created: cs.Meta.Created.Format(time.RFC3339),
			Workspace: cs.Meta.Workspace, Command: cs.Meta.Command, ExitCode: cs.Meta.ExitCode}
		if r.Status == "running" {
			if unlock, err := cs.Lock(); err == nil {
				unlock()
				r.Status = "interrupted"
			}
		}
		for _, mr := range cs.Meta.Roots {
			r.Roots = append(r.Roots, mr.Path)
		}
		if n := cs.Meta.Counts; n != nil && r.Status == changeset.StatusOpen {
			r.Added, r.Modified, r.Deleted = n.Added, n.Modified, n.Deleted
		} else if entries, err := changeset.Scan(ctx, cs.Roots()); err == nil {
			// Counted as of now: an interrupted run recorded none.
			n := changeset.Count(entries)
			r.Added, r.Modified, r.Deleted = n.Added, n.Modified, n.Deleted
		}
		rows = append(rows, r)
	}
	if asJSON {
		b, _ := json.MarshalIndent(rows, "", "  ")
		io.Stdout.Write(append(b, '\n'))
		return 0
	}
	if len(rows) == 0 {
		fmt.Fprintln(io.Stdout, "no changesets")
		return 0
	}
	fmt.Fprintf(io.Stdout, "%-12s  %-11s  %-16s  %-17s  %-20s  %s\n", "ID", "STATUS", "CREATED", "CHANGES", "ROOTS", "COMMAND")
	for _, r := range rows {
		changes := fmt.Sprintf("+%d ~%d -%d", r.Added, r.Modified, r.Deleted)
		// Roots: "." for the workspace listed, paths for the rest.
		roots := make([]string, len(r.Roots))
		for i, p := range r.Roots {
			roots[i] = p
			if p == ws && !all {
				roots[i] = "."
			}
		}
		fmt.Fprintf(io.Stdout, "%-12s  %-11s  %-16s  %-17s  %-20s  %s\n", r.ID, r.Status, ago(r.Created), changes,
			strings.Join(roots, ","), quoteCmd(r.Command))
	}
	return 0
}

func ago(ts string) string {
	t, err := time.Parse(time.RFC3339, ts)
	if err != nil {
		return ts
	}
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%d min ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h ago", int(d.Hours()))
	}
	return t.Format("2006-01-02 15:04")
}

func quoteCmd(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`|&;<>()*?") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

func diffMain(ctx context.Context, io *IO, args []string) int {
	useAllCPUs()
	var stat, nameStatus, asJSON bool
	var exclude []string
	fs := newFlagSet("diff")
	fs.Bool(&stat, "stat", 0, "a summary per file")
	fs.Bool(&nameStatus, "name-status", 0, "one line per file: A, M or D and the path")
	fs.Bool(&asJSON, "json", 0, "print JSON")
	fs.List(&exclude, "exclude", 'x', "GLOB", "leave out paths matching GLOB (repeatable; * crosses /)")
	rest, err := fs.ParseAll(args)
	if err != nil {
		return fail(io, err)
	}
	if fs.help {
		fmt.Fprint(io.Stdout, "Usage: pinfold diff [ID] [flags] [--] [PATHS...]\n\nShows what a changeset (default: the newest open one of this workspace) would change,\nas a git-style unified diff: binary files marked, mode changes, symlinks, deletions.\n\nFlags:\n")
		fs.Usage(io.Stdout)
		return 0
	}
	if err := recoverApplies(ctx, io); err != nil {
		return fail(io, err)
	}
	dir, err := storeDir()
	if err != nil {
		return fail(io, err)
	}
	cs, paths, err := changesetAndPaths(dir, rest)
	if err != nil {
		return fail(io, err)
	}
	roots := cs.Roots()
	entries, err := changeset.Scan(ctx, roots)
	if err != nil {
		return fail(io, fault.New(fault.Store, "cannot read changeset "+cs.Meta.ID, err.Error(), "", err))
	}
	o := changeset.DiffOptions{Paths: relPaths(cs, paths), Exclude: exclude, Prefix: rootPrefix(cs)}
	switch {
	case asJSON:
		err = changeset.WriteJSON(io.Stdout, roots, entries, o)
	case stat:
		err = changeset.WriteStat(io.Stdout, roots, entries, o)
	case nameStatus:
		err = changeset.WriteNameStatus(io.Stdout, roots, entries, o)
	default:
		err = changeset.WriteDiff(io.Stdout, roots, entries, o)
	}
	if err != nil {
		return fail(io, fault.New(fault.Store, "cannot show changeset "+cs.Meta.ID, err.Error(), "", err))
	}
	return 0
}

// rootPrefix shows the workspace's paths as they are and captured
// directories' paths from /.
func rootPrefix(cs *changeset.Changeset) func(int) string {
	return func(i int) string {
		if i == 0 && cs.Meta.Roots[0].Path == cs.Meta.Workspace {
			return ""
		}
		return strings.TrimPrefix(cs.Meta.Roots[i].Path, "/") + "/"
	}
}

func applyMain(ctx context.Context, io *IO, args []string) int {
	useAllCPUs()
	var force bool
	fs := newFlagSet("apply")
	fs.Bool(&force, "force", 'f', "apply even where the originals changed since the run")
	rest, err := fs.ParseAll(args)
	if err != nil {
		return fail(io, err)
	}
	if fs.help {
		fmt.Fprint(io.Stdout, "Usage: pinfold apply [ID] [flags] [--] [PATHS...]\n\nWrites a changeset (default: the newest open one of this workspace) into the\nworkspace, file by file and journaled. Refuses when an original changed since the\nrun, listing the conflicts. With PATHS, applies only those; the changeset stays open.\n\nFlags:\n")
		fs.Usage(io.Stdout)
		return 0
	}
	if err := recoverApplies(ctx, io); err != nil {
		return fail(io, err)
	}
	dir, err := storeDir()
	if err != nil {
		return fail(io, err)
	}
	cs, paths, err := changesetAndPaths(dir, rest)
	if err != nil {
		return fail(io, err)
	}
	unlock, err := cs.Lock()
	if err != nil {
		return fail(io, fault.New(fault.Busy, "changeset "+cs.Meta.ID+" is in use", err.Error(), "wait for the other pinfold to finish", err))
	}
	defer unlock()
	res, err := applyChangeset(ctx, cs, relPaths(cs, paths), force)
	if err != nil {
		return fail(io, err)
	}
	fmt.Fprintf(io.Stderr, "pinfold: applied %d changes from changeset %s\n", res.Applied, cs.Meta.ID)
	return 0
}

func discardMain(ctx context.Context, io *IO, args []string) int {
	fs := newFlagSet("discard")
	rest, err := fs.ParseAll(args)
	if err != nil {
		return fail(io, err)
	}
	if fs.help {
		fmt.Fprint(io.Stdout, "Usage: pinfold discard [ID]\n\nThrows a changeset away (default: the newest open one of this workspace).\n")
		return 0
	}
	if len(rest) > 1 {
		return fail(io, fs.errorf("pinfold discard takes one changeset id"))
	}
	if err := recoverApplies(ctx, io); err != nil {
		return fail(io, err)
	}
	dir, err := storeDir()
	if err != nil {
		return fail(io, err)
	}
	id := ""
	if len(rest) == 1 {
		id = rest[0]
	}
	cs, err := openChangeset(dir, id, currentWorkspace())
	if err != nil {
		return fail(io, err)
	}
	unlock, err := cs.Lock()
	if err != nil {
		return fail(io, fault.New(fault.Busy, "changeset "+cs.Meta.ID+" is in use", err.Error(), "wait for the other pinfold to finish", err))
	}
	defer unlock()
	if err := dropChangeset(cs); err != nil {
		return fail(io, fault.New(fault.Store, "cannot remove changeset "+cs.Meta.ID, err.Error(), "", err))
	}
	fmt.Fprintf(io.Stderr, "pinfold: discarded changeset %s\n", cs.Meta.ID)
	return 0
}

func exportMain(ctx context.Context, io *IO, args []string) int {
	useAllCPUs()
	var out string
	fs := newFlagSet("export")
	fs.String(&out, "output", 'o', "FILE", "write the layer to FILE (default: standard output)")
	rest, err := fs.ParseAll(args)
	if err != nil {
		return fail(io, err)
	}
	if fs.help {
		fmt.Fprint(io.Stdout, "Usage: pinfold export [ID] [-o FILE]\n\nWrites a changeset as an OCI image layer (an uncompressed tar with whiteouts for\ndeletions), paths from the root of the filesystem.\n\nFlags:\n")
		fs.Usage(io.Stdout)
		return 0
	}
	if len(rest) > 1 {
		return fail(io, fs.errorf("pinfold export takes one changeset id"))
	}
	dir, err := storeDir()
	if err != nil {
		return fail(io, err)
	}
	id := ""
	if len(rest) == 1 {
		id = rest[0]
	}
	cs, err := openChangeset(dir, id, currentWorkspace())
	if err != nil {
		return fail(io, err)
	}
	roots := cs.Roots()
	entries, err := changeset.Scan(ctx, roots)
	if err != nil {
		return fail(io, fault.New(fault.Store, "cannot read changeset "+cs.Meta.ID, err.Error(), "", err))
	}
	w := io.Stdout
	if out != "" {
		f, err := os.Create(out)
		if err != nil {
			return fail(io, fault.New(fault.BadValue, "cannot write "+out, err.Error(), "", err))
		}
		defer f.Close()
		w = f
	}
	if err := changeset.Export(w, roots, entries); err != nil {
		return fail(io, fault.New(fault.Store, "cannot export changeset "+cs.Meta.ID, err.Error(), "", err))
	}
	return 0
}

func findConfig(dir string) (string, error) { return config.Find(dir) }
