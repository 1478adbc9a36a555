package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/sandbox"
)

// TestClassify: each class of error gets its code, with a plan or
// (where the code does not depend on the plan) without one, so that a
// front end that has no plan yet says what one that has it says.
func TestClassify(t *testing.T) {
	p := &plan.Plan{Mode: "sandbox"}
	unsupported := &sandbox.UnsupportedError{Runtime: "podman", Feature: "scratch /tmp", Asked: "/x"}
	for _, c := range []struct {
		name string
		err  error
		p    *plan.Plan
		want fault.Code
	}{
		{"fault passes", fmt.Errorf("starting: %w", fault.New(fault.Busy, "busy", "", "", nil)), nil, fault.Busy},
		{"unsupported", fmt.Errorf("starting: %w", unsupported), p, fault.RuntimeLacks},
		{"unsupported without a plan", unsupported, nil, fault.RuntimeLacks},
		{"check", &sandbox.CheckError{What: "no podman", Err: errors.New("not found")}, nil, fault.Preflight},
		{"not found", &sandbox.ExecError{Name: "x", Err: fs.ErrNotExist}, p, fault.NotFound},
		{"cannot exec", &sandbox.ExecError{Name: "x", Err: errors.New("exec format error")}, p, fault.CannotExec},
		{"mount", &sandbox.SpecError{Field: "mount", Err: errors.New("no such file")}, p, fault.BadMount},
		{"unknown", errors.New("something else"), p, fault.Internal},
	} {
		var fe *fault.Error
		if err := Classify(c.err, c.p); !errors.As(err, &fe) || fe.Code != c.want {
			t.Errorf("%s: %v, want %s", c.name, err, c.want)
		}
	}
	if Classify(nil, nil) != nil {
		t.Error("nil is not an error")
	}
}
