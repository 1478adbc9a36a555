package engine_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/gvisor"
)

// TestGVisorIsAskedFor: auto never picks gvisor on its own, and a
// profile that asks for it is run by gVisor or refused, never by
// another runtime when runsc is missing.
func TestGVisorIsAskedFor(t *testing.T) {
	if slices.Contains(engine.AutoOrder, gvisor.Name) {
		t.Errorf("auto tries gvisor: %v", engine.AutoOrder)
	}
	e, ws := newEngine(t, "profiles:\n  untrusted:\n    backend: gvisor\n    access: ro\n"+
		"dispatch:\n  - command: sh\n    profile: untrusted\n")
	p := resolve(t, e, ws, plan.Flags{}, "sh", "-c", "true")
	if p.Backend != gvisor.Name {
		t.Fatalf("the profile's command got backend %q", p.Backend)
	}
	if p := resolve(t, e, ws, plan.Flags{}, "true"); p.Backend != "native" {
		t.Errorf("the top level's command got backend %q", p.Backend)
	}
	t.Setenv(gvisor.RunscEnv, "/nonexistent/runsc")
	e.Runtimes = func(name string) (sandbox.Runtime, error) {
		if name == gvisor.Name {
			return gvisor.NewRuntime(gvisor.WithStore(e.Store)), nil // its Check fails: no runsc
		}
		return engine.Runtime(e.Store, name)
	}
	r, err := e.Start(context.Background(), p, engine.Options{Stdout: io.Discard, Stderr: io.Discard})
	if err == nil {
		r.Wait()
		t.Fatal("started without runsc")
	}
	var ce *sandbox.CheckError
	if !errors.As(err, &ce) || ce.Runtime != gvisor.Name {
		t.Errorf("without runsc: got %v, want gvisor's check failure", err)
	}
}
