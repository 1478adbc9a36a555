package engine_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/host"
)

// cleaner is a runtime that left things behind.
type cleaner struct {
	host.Runtime
	left []string
	err  error
}

func (c cleaner) Clean(ctx context.Context) ([]string, error) { return c.left, c.err }

// TestClean: Clean asks every runtime that is a sandbox.Cleaner, by no
// concrete type, says what each removed, and stops at the first that
// fails, naming it.
func TestClean(t *testing.T) {
	e := engine.New(t.TempDir())
	broken := errors.New("no daemon")
	var asked []string
	e.Runtimes = func(name string) (sandbox.Runtime, error) {
		asked = append(asked, name)
		switch name {
		case "native":
			return cleaner{left: []string{"/sys/fs/cgroup/pinfold/x"}}, nil
		case "podman":
			return host.Runtime{}, nil // not a Cleaner: skipped
		case "docker":
			return cleaner{left: []string{"docker container y"}, err: broken}, nil
		}
		return cleaner{left: []string{"never asked"}}, nil
	}
	var removed []string
	err := e.Clean(context.Background(), func(what string) { removed = append(removed, what) })
	var ce *engine.CleanError
	if !errors.As(err, &ce) || ce.Runtime != "docker" || !errors.Is(err, broken) {
		t.Errorf("error %v, want docker's", err)
	}
	if !slices.Equal(removed, []string{"/sys/fs/cgroup/pinfold/x", "docker container y"}) {
		t.Errorf("removed %q", removed)
	}
	if !slices.Equal(asked, []string{"native", "podman", "docker"}) {
		t.Errorf("asked %q", asked)
	}
}
