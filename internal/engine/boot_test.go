package engine_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/pinfold/pinfold/internal/changeset"
	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/plan"
)

// TestEarlierBootFailsClosed: a changeset a run wrote during an earlier
// boot of the host (unsynced, through a volatile overlay) is neither run
// into again nor applied without --force (PF188); one of this boot is.
func TestEarlierBootFailsClosed(t *testing.T) {
	if changeset.BootID() == "" {
		t.Skip("the kernel gives no boot id")
	}
	e, ws := newEngine(t, "")
	ctx := context.Background()
	o, err := e.Run(ctx, resolve(t, e, ws, plan.Flags{}, "sh", "-c", "echo a > a"), engine.Options{})
	if err != nil || o.Changeset == nil || o.Changeset.Empty {
		t.Fatalf("run: %v %+v", err, o)
	}
	id := o.Changeset.ID
	cs, err := changeset.Open(e.Store, id)
	if err != nil {
		t.Fatal(err)
	}
	if cs.Meta.BootID != changeset.BootID() || cs.Meta.EarlierBoot() {
		t.Fatalf("recorded boot %q, this boot %q", cs.Meta.BootID, changeset.BootID())
	}
	// As if the host had restarted since the run.
	cs.Meta.BootID = "00000000-0000-0000-0000-000000000000"
	if err := cs.Save(); err != nil {
		t.Fatal(err)
	}
	var fe *fault.Error
	_, err = e.Run(ctx, resolve(t, e, ws, plan.Flags{Changeset: id}, "sh", "-c", "echo b > b"), engine.Options{})
	if !errors.As(err, &fe) || fe.Code != fault.EarlierBoot {
		t.Fatalf("a rerun into it: %v", err)
	}
	if _, err := e.ApplyChangeset(ctx, id, engine.ApplyRequest{}, nil); !errors.As(err, &fe) || fe.Code != fault.EarlierBoot {
		t.Fatalf("apply: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "a")); err == nil {
		t.Fatal("applied although refused")
	}
	if _, err := e.ApplyChangeset(ctx, id, engine.ApplyRequest{Force: true}, nil); err != nil {
		t.Fatalf("apply --force: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "a")); string(b) != "a\n" {
		t.Errorf("applied %q", b)
	}
}

// TestEarlierBootApplyNotFinished: an apply the host's restart stopped
// is not finished by the next command (it would write the rest from an
// upper directory the crash may have cut short); apply --force finishes
// it.
func TestEarlierBootApplyNotFinished(t *testing.T) {
	if changeset.BootID() == "" {
		t.Skip("the kernel gives no boot id")
	}
	e, ws := newEngine(t, "")
	ctx := context.Background()
	os.Mkdir(filepath.Join(ws, "imm"), 0o755)
	os.WriteFile(filepath.Join(ws, "z"), []byte("orig\n"), 0o644)
	o, err := e.Run(ctx, resolve(t, e, ws, plan.Flags{}, "sh", "-c", "mkdir imm/new; echo changed > z"), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("chattr", "+i", filepath.Join(ws, "imm")).Run(); err != nil {
		t.Skip("no chattr +i here:", err)
	}
	defer exec.Command("chattr", "-i", filepath.Join(ws, "imm")).Run()
	cs, err := e.OpenChangeset(o.Changeset.ID, ws)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Apply(ctx, cs, nil, false); err == nil {
		t.Fatal("apply into an immutable directory succeeded")
	}
	// The apply stopped before z; then, as if the host had restarted.
	exec.Command("chattr", "-i", filepath.Join(ws, "imm")).Run()
	if cs, err = e.OpenChangeset(o.Changeset.ID, ws); err != nil {
		t.Fatal(err)
	}
	cs.Meta.BootID = "00000000-0000-0000-0000-000000000000"
	if err := cs.Save(); err != nil {
		t.Fatal(err)
	}
	if err := e.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "z")); string(b) != "orig\n" {
		t.Fatalf("the next command finished the apply of an earlier boot: z = %q", b)
	}
	var fe *fault.Error
	if _, err := e.Apply(ctx, cs, nil, false); !errors.As(err, &fe) || fe.Code != fault.EarlierBoot {
		t.Fatalf("apply: %v", err)
	}
	if _, err := e.Apply(ctx, cs, nil, true); err != nil {
		t.Fatalf("apply --force: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "z")); string(b) != "changed\n" {
		t.Errorf("forced: z = %q", b)
	}
}
