package engine

// Applying a changeset to its workspace: the checks before anything is
// written (policy files, conflicts, unfinished applies), the marker that
// lets Recover finish an interrupted apply, and the faults of each refusal.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/pinfold/pinfold/internal/changeset"
	"github.com/pinfold/pinfold/internal/fault"
)

// ApplyRequest is what an apply writes and what it may write over.
type ApplyRequest struct {
	Paths []string // only these (and what is below them); all when empty
	Force bool     // write over originals changed since the run
	// Policy lets the apply add, change or remove a pinfold.yaml (see
	// changeset.PolicyChanges); without it such a changeset is refused.
	Policy bool
}

// Apply writes cs (only paths, when given) into its roots, journaled, and
// drops it once fully applied; a change to a pinfold.yaml is refused
// (ApplyWith lets it through). The caller holds cs's lock.
func (e *Engine) Apply(ctx context.Context, cs *changeset.Changeset, paths []string, force bool) (changeset.ApplyResult, error) {
	return e.ApplyWith(ctx, cs, ApplyRequest{Paths: paths, Force: force})
}

// ApplyWith is Apply with every choice of the caller's.
func (e *Engine) ApplyWith(ctx context.Context, cs *changeset.Changeset, req ApplyRequest) (changeset.ApplyResult, error) {
	paths, force := req.Paths, req.Force
	roots := cs.Roots()
	entries, err := changeset.Scan(ctx, roots)
	if err != nil {
		return changeset.ApplyResult{}, storeError("cannot read changeset "+cs.Meta.ID, err)
	}
	if !req.Policy {
		// Before anything is written or marked: the next run would obey
		// the file, pre_run hooks on the host included.
		if pc := changeset.PolicyChanges(roots, entries, paths, cs.Prefix); len(pc) > 0 {
			return changeset.ApplyResult{}, PolicyFault(cs.Meta.ID, pc)
		}
	}
	var owner *changeset.Owner
	if os.Geteuid() == 0 {
		var st syscall.Stat_t
		if err := syscall.Stat(roots[0].Lower, &st); err == nil {
			owner = &changeset.Owner{UID: st.Uid, GID: st.Gid}
		}
	}
	marker := filepath.Join(applyingDir(e.Store), cs.Meta.ID)
	os.MkdirAll(applyingDir(e.Store), 0o700)
	mode := "all"
	if len(paths) > 0 {
		mode = "partial"
	}
	if err := os.WriteFile(marker, []byte(mode), 0o600); err != nil {
		return changeset.ApplyResult{}, storeError("cannot record the apply of changeset "+cs.Meta.ID, err)
	}
	fp, err := cs.Fingerprints()
	if err != nil {
		os.Remove(marker)
		return changeset.ApplyResult{}, storeError("cannot read changeset "+cs.Meta.ID, err)
	}
	if cf := journalConflicts(ctx, cs); len(cf) > 0 && !force {
		// Its own unfinished apply is finished first, without a conflict
		// check of its own: done here. The marker stays (it is pending).
		return changeset.ApplyResult{Conflicts: cf}, conflictFault(cs, cf, changeset.ErrConflict)
	}
	if err := e.unappliable(cs, fp, force); err != nil {
		os.Remove(marker)
		return changeset.ApplyResult{}, err
	}
	// One apply at a time per workspace, from the conflict check to the
	// last rename: the next one sees what this one wrote.
	unlock, err := changeset.LockRoots(ctx, e.Store, roots)
	if err != nil {
		os.Remove(marker)
		return changeset.ApplyResult{}, storeError("cannot lock the workspace of changeset "+cs.Meta.ID, err)
	}
	res, err := changeset.Apply(ctx, cs.Dir, roots, entries, changeset.ApplyOptions{Paths: paths, Prefix: cs.Prefix,
		Force: force, Owner: owner, Fingerprints: fp})
	unlock()
	if err != nil {
		return res, applyFault(cs, res, err, marker)
	}
	os.Remove(marker)
	if len(paths) == 0 {
		return res, e.Drop(cs)
	}
	// What is left to apply, for pinfold changes.
	if left, err := changeset.Scan(ctx, roots); err == nil {
		n := changeset.Count(left)
		cs.Meta.Counts = &n
		cs.Save()
	}
	return res, nil
}

// unappliable refuses, unless forced, a changeset whose originals
// cannot be checked (no fingerprints: its run was killed, or they were
// lost), and, forced or not, one that another unfinished apply to the
// same workspace would clash with.
func (e *Engine) unappliable(cs *changeset.Changeset, fp changeset.Fingerprints, force bool) error {
	if !force && cs.Meta.Status == changeset.StatusRunning {
		// Killed before it ended (a first run, or a rerun into it): no
		// fingerprints of what that run touched were taken, so a file
		// edited since could not be told apart.
		return fault.New(fault.Conflict, "changeset "+cs.Meta.ID+" was interrupted (its run was killed before it ended)",
			"pinfold took no fingerprints of the files that run touched, so it cannot tell whether you changed them since",
			"review it (pinfold diff "+cs.Meta.ID+"), then apply with --force to write it over them", nil)
	}
	if !force && cs.Meta.EarlierBoot() {
		return earlierBoot(cs, "review it (pinfold diff "+cs.Meta.ID+"), then apply with --force to write it as it is")
	}
	if fp == nil && !force && cs.Meta.Status == changeset.StatusOpen {
		// Recorded unsynced, then the machine went down: the record
		// stayed, the fingerprints did not.
		return fault.New(fault.Conflict, "changeset "+cs.Meta.ID+" has no fingerprints of the files it touches",
			"they were lost (the machine went down right after its run?), so pinfold cannot tell whether you changed them since",
			"review it (pinfold diff "+cs.Meta.ID+"), then apply with --force to write it over them", nil)
	}
	if other := e.pendingApply(cs); other != "" {
		return fault.New(fault.ApplyFailed, "changeset "+other+" was being applied to this workspace, and its apply is not finished",
			"writing another changeset first would be overwritten, or overwrite it, when that apply is finished",
			"finish it (pinfold apply "+other+") or give it up (pinfold discard "+other+"), then apply "+cs.Meta.ID, nil)
	}
	return nil
}

// applyFault is the fault of an apply of cs that failed with err. A
// conflict or an unsafe path wrote nothing: its marker goes. An apply
// that stopped keeps it: the journal is finished (by the next pinfold
// command once it can be, or by applying this changeset again) before
// anything else is applied to this workspace.
func applyFault(cs *changeset.Changeset, res changeset.ApplyResult, err error, marker string) error {
	switch {
	case errors.Is(err, changeset.ErrConflict):
		os.Remove(marker)
		return conflictFault(cs, res.Conflicts, err)
	case errors.Is(err, changeset.ErrUnsafe):
		os.Remove(marker)
		return fault.New(fault.ApplyFailed, "refusing to apply changeset "+cs.Meta.ID, err.Error(),
			"discard it, or apply only other paths", err)
	}
	return fault.New(fault.ApplyFailed, "applying changeset "+cs.Meta.ID+" stopped", err.Error(),
		"every file is either as before or fully applied; fix the cause (e.g. free space), then run pinfold apply "+
			cs.Meta.ID+" again, which writes the rest (or pinfold discard "+cs.Meta.ID+" to give it up)", err)
}

// conflictFault lists the originals that changed since cs's run.
func conflictFault(cs *changeset.Changeset, cf []changeset.Conflict, err error) error {
	var b strings.Builder
	for _, c := range cf {
		fmt.Fprintf(&b, "\n    %s: %s", c.Path, c.Why)
	}
	return fault.New(fault.Conflict, fmt.Sprintf("changeset %s conflicts with the workspace (%d files)",
		cs.Meta.ID, len(cf)), "these originals changed since the run:"+b.String(),
		"review them (pinfold diff "+cs.Meta.ID+"), then apply with --force to overwrite them", err)
}

// journalConflicts is, for a changeset whose apply stopped with its
// journal left, the originals that changed since its run (what is already
// applied holds the changeset's version, and is no conflict): replaying
// the journal would write over them unchecked.
func journalConflicts(ctx context.Context, cs *changeset.Changeset) []changeset.Conflict {
	if _, err := os.Stat(filepath.Join(cs.Dir, "apply.json")); err != nil {
		return nil
	}
	fp, err := cs.Fingerprints()
	if err != nil || fp == nil {
		return nil
	}
	entries, err := changeset.Scan(ctx, cs.Roots())
	if err != nil {
		return nil
	}
	return changeset.Conflicts(cs.Roots(), entries, fp)
}

// pendingApply names another changeset whose apply into one of cs's
// roots stopped and is not finished yet (its marker and journal are
// left, and no pinfold holds it), or "".
func (e *Engine) pendingApply(cs *changeset.Changeset) string {
	ents, _ := os.ReadDir(applyingDir(e.Store))
	for _, ent := range ents {
		if ent.Name() == cs.Meta.ID {
			continue
		}
		other, err := changeset.Open(e.Store, ent.Name())
		if err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(other.Dir, "apply.json")); err != nil {
			continue
		}
		unlock, err := other.Lock()
		if err != nil {
			continue // being applied now: LockRoots orders the two
		}
		unlock()
		for _, a := range other.Roots() {
			for _, b := range cs.Roots() {
				if within(a.Lower, b.Lower) || within(b.Lower, a.Lower) {
					return other.Meta.ID
				}
			}
		}
	}
	return ""
}

// within tells whether path is dir or below it.
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// PolicyFault refuses to apply changeset id, whose changes pc to config
// files later runs would obey.
func PolicyFault(id string, pc []changeset.PolicyChange) error {
	var b strings.Builder
	for i := range pc {
		b.WriteString("\n    " + pc[i].String())
	}
	return fault.New(fault.PolicyChange, "changeset "+id+" changes pinfold.yaml (or a file its pre_run hooks run), the policy later runs obey on the host",
		"a sandboxed command wrote it; applying it makes its settings and hooks yours:"+b.String(),
		"review it (pinfold diff "+id+"), then accept it with pinfold apply --policy "+id+"; or apply only other paths, or discard it", nil)
}

// earlierBoot is the refusal of a changeset that a run wrote during an
// earlier boot of the host (changeset.Meta.EarlierBoot).
func earlierBoot(cs *changeset.Changeset, fix string) error {
	return fault.New(fault.EarlierBoot, "changeset "+cs.Meta.ID+" was written before the host restarted",
		"runs write a changeset without syncing it (its overlay is volatile), so a crash since may have left its files empty or partly written",
		fix, nil)
}
