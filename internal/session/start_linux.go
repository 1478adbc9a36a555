package session

import (
	"context"

	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/internal/plan"
)

// StartOptions is what a front end adds to a StartRequest.
type StartOptions struct {
	// Snapshot is the id of a snapshot (of the request's tenant) whose
	// files are restored into the new session; "" starts it empty.
	Snapshot string
	// Exe is the pinfold binary that supervises ("" the running one).
	Exe string
	// Check may refuse the resolved plan before anything starts (the
	// server's tenant policy).
	Check func(*plan.Plan) error
}

// Start starts a session the same way for every front end (the CLI, the
// HTTP API): it resolves the plan, so that a bad one is refused before
// anything starts, opens the snapshot and checks that it fits the
// workspace, spawns the supervisor and restores the snapshot into the
// session, which is aborted if that fails. Its errors are classified
// (engine.Classify), so each front end gives a failure the same code.
func Start(ctx context.Context, eng *engine.Engine, st *Store, req *StartRequest, o StartOptions) (*Record, error) {
	p, err := Resolve(ctx, eng, req, "")
	if err == nil && o.Check != nil {
		err = o.Check(p)
	}
	if err != nil {
		return nil, engine.Classify(err, p)
	}
	var from *Snapshot
	if o.Snapshot != "" {
		if from, err = OpenSnapshot(st, o.Snapshot, req.Tenant); err == nil {
			err = from.Fits(p.Sandbox.Workspace)
		}
		if err != nil {
			return nil, err
		}
	}
	r, err := Spawn(ctx, st, eng.Store, o.Exe, req)
	if err != nil {
		return nil, engine.Classify(err, nil)
	}
	if from != nil {
		if err := Restore(ctx, st, r, from); err != nil {
			Abort(ctx, st, r, req.Flags.Changeset == "")
			return nil, engine.Classify(err, nil)
		}
	}
	return r, nil
}
