package engine_test

import (
	"context"
	"slices"
	"testing"

	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/native"
)

// steps is the native runtime whose sandboxes log when their command
// starts.
type steps struct {
	*native.Runtime
	log *[]string
}

func (r steps) New(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := r.Runtime.New(ctx, spec)
	return stepsSandbox{sb, r.log}, err
}

type stepsSandbox struct {
	sandbox.Sandbox
	log *[]string
}

func (s stepsSandbox) Run(ctx context.Context, cmd *sandbox.Cmd) (sandbox.Process, error) {
	*s.log = append(*s.log, "command")
	return s.Sandbox.Run(ctx, cmd)
}

// TestBeforeCommand: Options.BeforeCommand runs once the sandbox is made
// and before its command starts: pinfold run waits there for its signal
// handlers.
func TestBeforeCommand(t *testing.T) {
	e, ws := newEngine(t, "")
	var log []string
	e.Runtimes = func(string) (sandbox.Runtime, error) { return steps{native.NewRuntime(), &log}, nil }
	p := resolve(t, e, ws, plan.Flags{Access: "ro"}, "true")
	out, err := e.Run(context.Background(), p, engine.Options{BeforeCommand: func() { log = append(log, "before") }})
	if err != nil || out.Result.ExitCode != 0 {
		t.Fatalf("%v %+v", err, out)
	}
	if !slices.Equal(log, []string{"before", "command"}) {
		t.Errorf("steps %q, want before, then the command", log)
	}
}
