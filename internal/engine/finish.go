package engine

import (
	"context"
	"os"
	"path/filepath"

	"github.com/pinfold/pinfold/internal/changeset"
	"github.com/pinfold/pinfold/internal/fault"
)

// The front ends (the CLI's apply and discard, the HTTP API's) apply and
// discard a changeset by its id through ApplyChangeset and
// DiscardChangeset, which finish what killed pinfolds left half done
// (Recover) and hold the changeset's lock themselves.

// openByID opens the changeset id once interrupted work is finished.
func (e *Engine) openByID(ctx context.Context, id string) (*changeset.Changeset, error) {
	if err := e.Recover(ctx); err != nil {
		return nil, err
	}
	cs, err := changeset.Open(e.Store, id)
	if err != nil {
		return nil, fault.New(fault.NoChangeset, "no changeset "+id, err.Error(), "it was applied or discarded (pinfold changes lists the open ones)", err)
	}
	return cs, nil
}

// ApplyChangeset applies the changeset id as ApplyWith does. check, when
// given, runs first with the lock held (the CLI checks the paths it was
// given there, and lists policy changes); its error stops the apply.
func (e *Engine) ApplyChangeset(ctx context.Context, id string, req ApplyRequest, check func(*changeset.Changeset) error) (changeset.ApplyResult, error) {
	cs, err := e.openByID(ctx, id)
	if err != nil {
		return changeset.ApplyResult{}, err
	}
	unlock, err := Lock(cs)
	if err != nil {
		return changeset.ApplyResult{}, err
	}
	defer unlock()
	if check != nil {
		if err := check(cs); err != nil {
			return changeset.ApplyResult{}, err
		}
	}
	return e.ApplyWith(ctx, cs, req)
}

// Discarded says what DiscardChangeset threw away.
type Discarded struct {
	ID string
	// Interrupted: its run was killed before it finished.
	Interrupted bool
	// PartlyApplied: an apply of it had started, so the workspace holds
	// part of it (each file whole).
	PartlyApplied bool
}

// DiscardChangeset throws the changeset id away.
func (e *Engine) DiscardChangeset(ctx context.Context, id string) (Discarded, error) {
	cs, err := e.openByID(ctx, id)
	if err != nil {
		return Discarded{}, err
	}
	unlock, err := Lock(cs)
	if err != nil {
		return Discarded{}, err
	}
	defer unlock()
	// Still "running" once we hold its lock: its run was killed.
	d := Discarded{ID: cs.Meta.ID, Interrupted: cs.Meta.Status == changeset.StatusRunning}
	if _, err := os.Stat(filepath.Join(cs.Dir, "apply.json")); err == nil {
		d.PartlyApplied = true
	}
	if err := e.Drop(cs); err != nil {
		return Discarded{}, fault.New(fault.Store, "cannot remove changeset "+cs.Meta.ID, err.Error(), "", err)
	}
	return d, nil
}
