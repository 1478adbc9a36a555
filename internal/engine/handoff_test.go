package engine_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/native"
)

// handing is the native runtime whose processes record what the engine
// asks of the fast path (sandbox.Handoffer) and then fail to hand off, so
// that the run goes on in the test's process.
type handing struct {
	*native.Runtime
	asked *[]sandbox.HandoffOptions
}

func (r handing) New(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := r.Runtime.New(ctx, spec)
	return handingSandbox{sb, r.asked}, err
}

type handingSandbox struct {
	sandbox.Sandbox
	asked *[]sandbox.HandoffOptions
}

func (s handingSandbox) Run(ctx context.Context, cmd *sandbox.Cmd) (sandbox.Process, error) {
	p, err := s.Sandbox.Run(ctx, cmd)
	return handingProcess{p, s.asked}, err
}

type handingProcess struct {
	sandbox.Process
	asked *[]sandbox.HandoffOptions
}

func (p handingProcess) Handoff(o sandbox.HandoffOptions) error {
	*p.asked = append(*p.asked, o)
	return errors.New("not in a test")
}

// TestHandoffRequest checks what the engine asks of a runtime's fast path:
// only for plans that can hand off, with the changeset's finish and the
// record's engine-side parts, only for plans a replay can reproduce; and a
// failed hand-off leaves a run that finishes as usual.
func TestHandoffRequest(t *testing.T) {
	e, ws := newEngine(t, "")
	var asked []sandbox.HandoffOptions
	e.Runtimes = func(string) (sandbox.Runtime, error) {
		return handing{native.NewRuntime(native.WithStore(e.Store)), &asked}, nil
	}
	exe, _ := os.Executable()
	started := time.Now()
	run := func(f plan.Flags, ready func(sandbox.Process, string) bool, args ...string) *engine.Outcome {
		t.Helper()
		asked = nil
		p := resolve(t, e, ws, f, args...)
		h := &engine.Handoff{TimeoutMsg: "timeout", TmpFullMsg: "tmp", Report: os.Stderr, Ready: ready,
			Record: &sandbox.LaunchRecord{Prefix: []string{"run", "--"}, Cwd: ws, Started: started}}
		out, err := e.Run(context.Background(), p, engine.Options{Handoff: h})
		if err != nil || out.Result.ExitCode != 0 {
			t.Fatalf("%+v %v: %v %+v", f, args, err, out)
		}
		return out
	}

	// Read-only: a record, and no changeset to finish.
	run(plan.Flags{Access: "ro"}, nil, "true")
	if len(asked) != 1 {
		t.Fatalf("ro: asked %d times, want once", len(asked))
	}
	o := asked[0]
	if o.TimeoutMsg != "timeout" || o.TmpFullMsg != "tmp" || o.Report != os.Stderr || o.Finish != nil {
		t.Errorf("ro: %+v", o)
	}
	if r := o.Record; r == nil || !slices.Equal(r.Empty, engine.PendingDirs(e.Store)) ||
		!r.AnyCommand || r.Stdin || r.MetaTail != "" || r.Cwd != ws || !r.Started.Equal(started) {
		t.Errorf("ro record: %+v", o.Record)
	}

	// A changeset: the waiter would finish it; its record carries the tail
	// of the changeset's meta.json.
	var readyID string
	out := run(plan.Flags{}, func(_ sandbox.Process, id string) bool { readyID = id; return true }, "sh", "-c", "echo x > f")
	if len(asked) != 1 || out.Changeset == nil || out.Changeset.Counts.Added != 1 {
		t.Fatalf("changeset: asked %d times, outcome %+v", len(asked), out.Changeset)
	}
	o = asked[0]
	if !slices.Equal(o.Finish, []string{exe, e.Store, out.Changeset.ID}) || readyID != out.Changeset.ID {
		t.Errorf("changeset: finish %q, ready with %q, want %s", o.Finish, readyID, out.Changeset.ID)
	}
	if o.Record == nil || o.Record.MetaTail == "" {
		t.Errorf("changeset record: %+v", o.Record)
	}

	// Ready says no: nothing is asked of the runtime.
	run(plan.Flags{Access: "ro"}, func(sandbox.Process, string) bool { return false }, "true")
	if len(asked) != 0 {
		t.Errorf("asked %d times after Ready refused", len(asked))
	}

	// Plans that cannot hand off are never asked.
	run(plan.Flags{Access: "ro", Memory: "64m"}, nil, "true")
	if len(asked) != 0 {
		t.Errorf("a plan with limits: asked %d times", len(asked))
	}

	// A plan with a step on the host (a hook) hands off unrecorded: a
	// replay would skip the step.
	e, ws = newEngine(t, "pre_run: \"true\"\n")
	e.Runtimes = func(string) (sandbox.Runtime, error) {
		return handing{native.NewRuntime(native.WithStore(e.Store)), &asked}, nil
	}
	run(plan.Flags{Access: "ro"}, nil, "true")
	if len(asked) != 1 || asked[0].Record != nil {
		t.Errorf("a plan with a hook: asked %d times: %+v", len(asked), asked)
	}
}
