package engine_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/pinfold/pinfold/internal/changeset"
	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/plan"
)

// TestApplyAndDiscardByID: the front ends' apply and discard by id hold
// the changeset's lock themselves (a held lock is PF183), stop at the
// caller's check, and answer PF180 for an id that names nothing.
func TestApplyAndDiscardByID(t *testing.T) {
	e, ws := newEngine(t, "")
	ctx := context.Background()
	run := func(script string) string {
		t.Helper()
		o, err := e.Run(ctx, resolve(t, e, ws, plan.Flags{}, "sh", "-c", script), engine.Options{})
		if err != nil || o.Changeset == nil || o.Changeset.Empty {
			t.Fatalf("run: %v %+v", err, o)
		}
		return o.Changeset.ID
	}
	var fe *fault.Error
	if _, err := e.ApplyChangeset(ctx, "0123456789ab", engine.ApplyRequest{}, nil); !errors.As(err, &fe) || fe.Code != fault.NoChangeset {
		t.Errorf("apply of nothing: %v", err)
	}
	id := run("echo a > a")
	cs, err := changeset.Open(e.Store, id)
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := cs.Lock()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.ApplyChangeset(ctx, id, engine.ApplyRequest{}, nil); !errors.As(err, &fe) || fe.Code != fault.Busy {
		t.Errorf("apply of a locked changeset: %v", err)
	}
	if _, err := e.DiscardChangeset(ctx, id); !errors.As(err, &fe) || fe.Code != fault.Busy {
		t.Errorf("discard of a locked changeset: %v", err)
	}
	unlock()
	refused := errors.New("refused by the caller")
	if _, err := e.ApplyChangeset(ctx, id, engine.ApplyRequest{}, func(*changeset.Changeset) error { return refused }); !errors.Is(err, refused) {
		t.Errorf("check: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "a")); err == nil {
		t.Fatal("applied although the check refused")
	}
	if _, err := e.ApplyChangeset(ctx, id, engine.ApplyRequest{}, nil); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "a")); string(b) != "a\n" {
		t.Errorf("applied %q", b)
	}
	id = run("echo b > b")
	d, err := e.DiscardChangeset(ctx, id)
	if err != nil || d.ID != id || d.Interrupted || d.PartlyApplied {
		t.Fatalf("discard: %+v %v", d, err)
	}
	if _, err := changeset.Open(e.Store, id); err == nil {
		t.Error("the discarded changeset is still there")
	}
	if _, err := os.Stat(filepath.Join(ws, "b")); err == nil {
		t.Error("a discarded changeset was applied")
	}
}
