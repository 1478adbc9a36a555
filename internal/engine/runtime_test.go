package engine_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/sandbox"
)

// TestRuntimesPerStore: the built-in runtimes are made once per store and
// backend, and each keeps to its own store: an engine's clean removes
// what killed runs left in its store's tmp, not in another store's.
func TestRuntimesPerStore(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, name := range []string{"native", "podman", "docker", "gvisor"} {
		ra, _ := engine.Runtime(a, name)
		again, _ := engine.Runtime(a, name)
		rb, _ := engine.Runtime(b, name)
		if ra != again {
			t.Errorf("%s: a second runtime on one store", name)
		}
		if ra == rb {
			t.Errorf("%s: one runtime for two stores", name)
		}
	}
	if _, err := engine.Runtime(a, "nonesuch"); err == nil {
		t.Error("an unknown backend has a runtime")
	}

	// "1-1-…": pid 1 did not start at tick 1, so its process is gone.
	left := func(store string) string {
		p := filepath.Join(store, "tmp", "1-1-0123456789ab")
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		return p
	}
	inA, inB := left(a), left(b)
	e := engine.New(a)
	e.Runtimes = func(name string) (sandbox.Runtime, error) {
		if name != "native" { // the others clean up outside the store
			return nil, errors.New("not in this test")
		}
		return engine.Runtime(e.Store, name)
	}
	var removed []string
	if err := e.Clean(context.Background(), func(what string) { removed = append(removed, what) }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(inA); err == nil {
		t.Errorf("the engine's store keeps %s (removed %q)", inA, removed)
	}
	if _, err := os.Stat(inB); err != nil {
		t.Errorf("another store's leftover is gone: %v", err)
	}
}
