package engine

import (
	"context"
	"fmt"

	"github.com/pinfold/pinfold/sandbox"
)

// cleanOrder is the order in which Clean asks the runtimes.
var cleanOrder = []string{"native", "podman", "docker", "gvisor", "kubernetes"}

// CleanError is Clean's error: which runtime could not clean up.
type CleanError struct {
	Runtime string
	Err     error
}

func (e *CleanError) Error() string { return fmt.Sprintf("cleaning up %s: %v", e.Runtime, e.Err) }
func (e *CleanError) Unwrap() error { return e.Err }

// Clean has every runtime that can leave things behind when pinfold is
// killed (a sandbox.Cleaner) remove what killed runs left, and passes
// each thing removed to removed. It stops at the first runtime that
// fails, with a *CleanError.
func (e *Engine) Clean(ctx context.Context, removed func(what string)) error {
	for _, name := range cleanOrder {
		rt, err := e.runtime(name)
		if err != nil {
			continue // not in this build
		}
		c, ok := rt.(sandbox.Cleaner)
		if !ok {
			continue
		}
		gone, err := c.Clean(ctx)
		for _, g := range gone {
			removed(g)
		}
		if err != nil {
			return &CleanError{Runtime: name, Err: err}
		}
	}
	return nil
}
