package engine

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/pinfold/pinfold/internal/agent"
	"github.com/pinfold/pinfold/internal/changeset"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/internal/procstat"
	"github.com/pinfold/pinfold/sandbox"
)

// ChangesetOutcome is what became of a run's changeset.
type ChangesetOutcome struct {
	ID     string
	Counts changeset.Counts
	// Empty: the run wrote nothing, and the changeset is gone.
	Empty bool
	// Applied: --apply wrote it into the workspace, and it is gone.
	Applied bool
	// DiskFull: the run hit its disk cap, so some writes failed; such a
	// changeset is never applied by --apply.
	DiskFull bool
	// DiskCap is the run's --disk, set by FinishHandedOff (which has no
	// plan) for the summary.
	DiskCap int64
	// Stripped are the files --apply wrote without the set-user-id and
	// set-group-id bits the command gave them.
	Stripped []string
}

// UseAllCPUs lifts the CLI's one-P setting for work that reads many files:
// the changeset code reads and compares them on several threads. That work
// is short and its memory is bounded by the changeset: collecting garbage
// less often is cheaper than touching fresh pages.
func UseAllCPUs() {
	if n := runtime.NumCPU(); n > 1 {
		runtime.GOMAXPROCS(n)
	}
	debug.SetGCPercent(400)
}

// OpenChangeset finds the changeset to act on: idOrPrefix, or the newest
// open one of the workspace.
func (e *Engine) OpenChangeset(idOrPrefix, workspace string) (*changeset.Changeset, error) {
	var cs *changeset.Changeset
	var err error
	if idOrPrefix != "" {
		cs, err = changeset.Open(e.Store, idOrPrefix)
	} else {
		cs, err = changeset.Latest(e.Store, workspace)
	}
	if err != nil {
		what := "no changeset " + idOrPrefix
		if idOrPrefix == "" {
			if ferr := e.whyNoneOpen(workspace); ferr != nil {
				return nil, ferr
			}
			what = "no open changeset for " + workspace
		}
		return nil, fault.New(fault.NoChangeset, what, err.Error(), "list them with pinfold changes", err)
	}
	return cs, nil
}

// Interrupted reports whether cs was left "running" by a run that is
// gone (killed): nobody holds its lock.
func Interrupted(cs *changeset.Changeset) bool {
	if cs.Meta.Status != changeset.StatusRunning {
		return false
	}
	unlock, err := cs.Lock()
	if err != nil {
		return false
	}
	unlock()
	return true
}

// whyNoneOpen explains a workspace without an open changeset when it has
// others: one that a run still writes to is PF183 (wait for it), ones
// that killed runs left are named (discard them, or review them by id).
func (e *Engine) whyNoneOpen(workspace string) error {
	all, err := changeset.List(e.Store)
	if err != nil {
		return nil
	}
	var interrupted []string
	for _, cs := range all {
		if cs.Meta.Workspace != workspace || cs.Meta.Status != changeset.StatusRunning {
			continue
		}
		if c := cs.Meta.Command; !Interrupted(cs) && len(c) > 1 && c[1] == agent.AgentCommand {
			// pinfold diff without an id reads the open changeset; a
			// running session's is named instead.
			return fault.New(fault.Busy, "changeset "+cs.Meta.ID+" of "+workspace+" is a running session's",
				"a session's changeset is reviewed by its id while the session runs, and applied or discarded once it stops "+
					"(a kubernetes session's writes come back into it when it stops)",
				"pinfold diff "+cs.Meta.ID+" shows it as it is now; pinfold session stop, then pinfold diff, apply or discard", changeset.ErrBusy)
		}
		if !Interrupted(cs) {
			return fault.New(fault.Busy, "changeset "+cs.Meta.ID+" of "+workspace+" is in use: its run is still going",
				"a changeset is recorded, and can be reviewed, applied or discarded, when the command that writes to it ends",
				"wait for the run to end, then run this again (pinfold changes shows it as running)", changeset.ErrBusy)
		}
		interrupted = append(interrupted, cs.Meta.ID)
	}
	if len(interrupted) == 0 {
		return nil
	}
	return fault.New(fault.NoChangeset, "no open changeset for "+workspace,
		"its changesets were left by runs that were killed before they finished (interrupted): "+strings.Join(interrupted, ", "),
		"review one with pinfold diff "+interrupted[0]+"; pinfold discard drops the newest (or pinfold discard ID); pinfold apply ID applies one", nil)
}

// OpenToDiscard finds the changeset pinfold discard drops: idOrPrefix,
// or the newest of the workspace that is open or interrupted (its run was
// killed: only discarding or applying it by id is left to do with it).
func (e *Engine) OpenToDiscard(idOrPrefix, workspace string) (*changeset.Changeset, error) {
	if idOrPrefix != "" {
		return e.OpenChangeset(idOrPrefix, workspace)
	}
	all, err := changeset.List(e.Store)
	if err != nil {
		return nil, storeError("cannot list changesets", err)
	}
	for _, cs := range all {
		if cs.Meta.Workspace == workspace && (cs.Meta.Status == changeset.StatusOpen || Interrupted(cs)) {
			return cs, nil
		}
	}
	return e.OpenChangeset("", workspace) // says why there is none
}

// RemoveEmptyInterrupted removes the changesets that runs killed before
// they finished left without any change (the +0 ~0 -0 of pinfold
// changes), and returns their ids. Those whose run still goes, and
// interrupted ones that hold changes, stay.
func (e *Engine) RemoveEmptyInterrupted(ctx context.Context) ([]string, error) {
	all, err := changeset.List(e.Store)
	if err != nil {
		return nil, storeError("cannot list changesets", err)
	}
	var removed []string
	var errs []error
	for _, cs := range all {
		if cs.Meta.Status != changeset.StatusRunning {
			continue
		}
		unlock, err := cs.Lock()
		if err != nil {
			continue // its run still goes (or an apply or discard holds it)
		}
		// Read again under the lock: its run may have ended meanwhile.
		if cur, err := changeset.Open(e.Store, cs.Meta.ID); err != nil || cur.Meta.Status != changeset.StatusRunning {
			unlock()
			continue
		}
		empty := emptyUppers(cs.Roots())
		if !empty {
			entries, err := changeset.Scan(ctx, cs.Roots())
			empty = err == nil && len(entries) == 0
		}
		if empty {
			if err := cs.Remove(); err != nil {
				errs = append(errs, err)
			} else {
				removed = append(removed, cs.Meta.ID)
			}
		}
		unlock()
	}
	return removed, errors.Join(errs...)
}

// Lock takes cs for this process: a run, an apply or a discard.
func Lock(cs *changeset.Changeset) (unlock func(), err error) {
	unlock, err = cs.Lock()
	if err != nil {
		if c := cs.Meta.Command; len(c) > 1 && c[1] == agent.AgentCommand {
			return nil, fault.New(fault.Busy, "changeset "+cs.Meta.ID+" is a running session's", err.Error(),
				"stop the session first (pinfold session ls names it; pinfold session stop SESSION); pinfold diff "+cs.Meta.ID+" reviews it meanwhile", err)
		}
		return nil, fault.New(fault.Busy, "changeset "+cs.Meta.ID+" is in use", err.Error(),
			"wait for the other pinfold to finish", err)
	}
	return unlock, nil
}

// applyingDir holds a marker per apply in progress, so that every command
// can find an interrupted one with a single directory read.
func applyingDir(dir string) string { return filepath.Join(dir, "applying") }

// Recover finishes what killed pinfolds left half done: the disks of their
// runs (whose writes join their changesets) and their applies. Every
// command that reads or writes changesets calls it first.
func (e *Engine) Recover(ctx context.Context) error {
	if e.Store == "" {
		return nil
	}
	if err := e.recoverDisks(ctx); err != nil {
		return err
	}
	ents, err := os.ReadDir(applyingDir(e.Store))
	if err != nil || len(ents) == 0 {
		return nil
	}
	for _, ent := range ents {
		marker := filepath.Join(applyingDir(e.Store), ent.Name())
		cs, err := changeset.Open(e.Store, ent.Name())
		if err != nil {
			os.Remove(marker)
			continue
		}
		unlock, err := cs.Lock()
		if err != nil {
			continue // another pinfold is applying it right now
		}
		if _, jerr := os.Stat(filepath.Join(cs.Dir, "apply.json")); jerr != nil {
			// Killed before it wrote anything: the changeset is intact.
			os.Remove(marker)
			unlock()
			continue
		}
		if cs.Meta.EarlierBoot() {
			// The host went down during the apply: what is left to
			// write comes from an upper directory written unsynced,
			// perhaps cut short by that very crash (PF188).
			unlock()
			e.notice("the unfinished apply of changeset %s was begun before the host restarted, from files written unsynced that a crash may have cut short; review it (pinfold diff %s), then pinfold apply --force %s finishes it, pinfold discard %s gives it up",
				cs.Meta.ID, cs.Meta.ID, cs.Meta.ID, cs.Meta.ID)
			continue
		}
		if cf := journalConflicts(ctx, cs); len(cf) > 0 {
			// Files the rest of the apply writes changed since the run
			// (edited while it could not be finished): not over them
			// unasked.
			unlock()
			e.notice("the unfinished apply of changeset %s would write over %s, changed since its run; pinfold apply --force %s writes it, pinfold discard %s gives it up",
				cs.Meta.ID, cf[0].Path, cs.Meta.ID, cs.Meta.ID)
			continue
		}
		if unlockRoots, lerr := changeset.LockRoots(ctx, e.Store, cs.Roots()); lerr != nil {
			err = lerr
		} else {
			err = changeset.Recover(ctx, cs.Dir, cs.Roots())
			unlockRoots()
		}
		if err == nil {
			e.notice("finished applying changeset %s (interrupted earlier)", cs.Meta.ID)
			// A partial apply (PATHS) leaves the changeset open.
			if b, _ := os.ReadFile(marker); string(b) != "partial" {
				err = e.Drop(cs)
			}
			os.Remove(marker)
		}
		unlock()
		if err != nil {
			// Said, not in the way: a workspace that went read-only, or
			// away, must not stop every pinfold command of the store.
			// Applies to that workspace wait for it (pendingApply); the
			// changeset keeps its journal and marker: pinfold apply ID
			// finishes it, pinfold discard ID drops it.
			e.notice("cannot finish the interrupted apply of changeset %s: %v; pinfold apply %s tries again, pinfold discard %s gives it up",
				cs.Meta.ID, err, cs.Meta.ID, cs.Meta.ID)
		}
	}
	return nil
}

// startChangeset creates (or, with --changeset, reopens) the changeset a
// run writes to, and points spec at it: the workspace's overlay is root 0
// when the plan has the changeset access, the captures follow in order.
func (e *Engine) startChangeset(p *plan.Plan, spec *sandbox.Spec) (*changeset.Changeset, func(), error) {
	sp := &p.Sandbox
	if sp.Access != sandbox.AccessChangeset && len(p.Captures) == 0 {
		return nil, func() {}, nil
	}
	if e.Store == "" {
		return nil, nil, fault.New(fault.Store, "cannot keep a changeset without pinfold's store", "", "set PINFOLD_STORE", nil)
	}
	paths := p.ChangesetRoots()
	var cs *changeset.Changeset
	var unlock func()
	var err error
	if p.Changeset != "" {
		if cs, err = e.OpenChangeset(p.Changeset, ""); err != nil {
			return nil, nil, err
		}
		if len(cs.Meta.Roots) != len(paths) || cs.Meta.Roots[0].Path != paths[0] {
			return nil, nil, fault.New(fault.BadValue, "changeset "+cs.Meta.ID+" captured other directories",
				"it holds "+rootPaths(cs)+"; this run captures "+strings.Join(paths, ", "),
				"run in the same workspace with the same --capture, or start a new changeset", nil)
		}
		if unlock, err = Lock(cs); err != nil {
			return nil, nil, err
		}
		if _, err := os.Stat(filepath.Join(cs.Dir, "apply.json")); err == nil {
			// Its journal names files of its upper directory: a run
			// that changed them would leave the rest unwritable.
			unlock()
			return nil, nil, fault.New(fault.ApplyFailed, "changeset "+cs.Meta.ID+" is being applied, and its apply is not finished",
				"a run into it would change what the rest of that apply writes",
				"finish it (pinfold apply "+cs.Meta.ID+") or give it up (pinfold discard "+cs.Meta.ID+")", nil)
		}
		if cs.Meta.EarlierBoot() {
			// Overlayfs would mount it, and the run would go on from
			// files that may not be what the last run wrote.
			unlock()
			return nil, nil, earlierBoot(cs, "review it (pinfold diff "+cs.Meta.ID+"), apply it with --force or discard it, and run into a new changeset")
		}
	} else if cs, unlock, err = changeset.CreateLocked(e.Store, sp.Workspace, paths, p.Command.Args); err != nil {
		return nil, nil, storeError("cannot create a changeset", err)
	}
	if p.Changeset != "" {
		cs.Meta.Status = changeset.StatusRunning // Create sets them for new ones
		cs.Meta.BootID = changeset.BootID()
		if err := cs.Save(); err != nil {
			unlock()
			return nil, nil, storeError("cannot save changeset "+cs.Meta.ID, err)
		}
	}
	roots := cs.Roots()
	captured := func(r changeset.Root) *sandbox.Capture {
		return &sandbox.Capture{Path: r.Lower, Upper: r.Upper, Work: filepath.Join(filepath.Dir(r.Upper), "work")}
	}
	i := 0
	spec.Captures = nil
	if sp.Access == sandbox.AccessChangeset {
		spec.Changeset = captured(roots[0])
		i = 1
	}
	for ; i < len(roots); i++ {
		spec.Captures = append(spec.Captures, *captured(roots[i]))
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

// finishChangeset records what the run changed and applies it with
// --apply when the command succeeded.
func (e *Engine) finishChangeset(ctx context.Context, cs *changeset.Changeset, p *plan.Plan, res *sandbox.Result, mark func(string)) (*ChangesetOutcome, error) {
	if mark == nil {
		mark = func(string) {}
	}
	out := &ChangesetOutcome{ID: cs.Meta.ID}
	roots := cs.Roots()
	reused := p.Changeset != ""
	if !reused && emptyUppers(roots) {
		out.Empty = true
		return out, cs.Remove() // most runs: nothing written
	}
	UseAllCPUs()
	// Counts and fingerprints need no stat of what a new directory holds.
	entries, err := changeset.ScanTypes(ctx, roots)
	if err != nil {
		return nil, storeError("cannot read changeset "+cs.Meta.ID, err)
	}
	mark("pinfold: changeset scanned")
	if len(entries) == 0 && !reused {
		out.Empty = true
		return out, cs.Remove()
	}
	fp, err := changeset.Fingerprint(roots, entries, !reused)
	if err != nil {
		return nil, storeError("cannot fingerprint changeset "+cs.Meta.ID, err)
	}
	if reused {
		// A rerun keeps what the originals looked like when first
		// captured; one into a changeset whose fingerprints are missing
		// (lost, or its first run killed) keeps them missing, so that its
		// apply still needs --force: this run's view of the originals
		// is not the one the first run changed.
		old, err := cs.Fingerprints()
		if err != nil {
			return nil, storeError("cannot read changeset "+cs.Meta.ID, err)
		}
		if old == nil {
			fp = nil
		}
		for k, v := range old {
			fp[k] = v
		}
	}
	if fp != nil {
		if err := cs.SaveFingerprints(fp); err != nil {
			return nil, storeError("cannot save changeset "+cs.Meta.ID, err)
		}
	}
	mark("pinfold: fingerprints saved")
	n := changeset.Count(entries)
	cs.Meta.Status, cs.Meta.ExitCode, cs.Meta.Finished, cs.Meta.Counts = changeset.StatusOpen, res.ExitCode, time.Now(), &n
	if err := cs.SaveUnsynced(); err != nil {
		return nil, storeError("cannot save changeset "+cs.Meta.ID, err)
	}
	mark("pinfold: changeset recorded")
	out.Counts = n
	out.DiskFull = slices.Contains(res.LimitsHit, LimitDisk)
	if p.Apply && res.ExitCode == 0 && !out.DiskFull {
		res, err := e.Apply(ctx, cs, nil, false)
		if err != nil {
			return out, err
		}
		out.Applied, out.Stripped = true, res.Stripped
	}
	return out, nil
}

// FinishHandedOff records the changeset of a run whose process handed
// off to the waiter (Options.Handoff) and then came back as this one: it
// still holds the changeset's lock, passed across the exec. exitCode is
// the command's status.
func (e *Engine) FinishHandedOff(ctx context.Context, id string, exitCode int) (*ChangesetOutcome, error) {
	cs, err := changeset.Open(e.Store, id)
	if err != nil {
		return nil, storeError("cannot find the run's changeset "+id, err)
	}
	res := &sandbox.Result{ExitCode: exitCode}
	full, capBytes, err := e.finishDisk(ctx, cs)
	if err != nil {
		return nil, err
	}
	if full {
		res.LimitsHit = append(res.LimitsHit, LimitDisk)
	}
	for _, r := range cs.Roots() {
		if _, err := os.Lstat(r.Upper); errors.Is(err, os.ErrNotExist) {
			// The waiter's removal of an empty one stopped half way.
			return &ChangesetOutcome{ID: id, Empty: true}, cs.Remove()
		}
	}
	out, err := e.finishChangeset(ctx, cs, &plan.Plan{}, res, nil)
	if out != nil {
		out.DiskCap = capBytes
	}
	return out, err
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

// Drop removes an applied or discarded changeset: out of the store at
// once, its files deleted by a detached pinfold so that the user does not
// wait for the file system (deleting many files that were written out
// takes long, the more so with online discard).
func (e *Engine) Drop(cs *changeset.Changeset) error {
	if err := cs.Trash(); err != nil {
		return cs.Remove()
	}
	exe, err := os.Executable()
	if err != nil || filepath.Base(exe) != "pinfold" {
		// Not the pinfold binary (a test, a renamed copy): delete here.
		_, err := changeset.EmptyTrash(e.Store, true)
		return err
	}
	cmd := exec.Command(exe, "clean", "--trash")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if cmd.Start() == nil {
		procstat.Idle(cmd.Process.Pid)
		cmd.Process.Release()
	}
	return nil // what remains, pinfold clean deletes
}

// PendingDirs are the store's directories that name work a killed pinfold
// left (interrupted applies, disks of runs): Recover empties them.
func PendingDirs(store string) []string { return []string{applyingDir(store), disksDir(store)} }
