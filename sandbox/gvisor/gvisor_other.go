//go:build !linux

package gvisor

import (
	"context"

	"github.com/pinfold/pinfold/sandbox"
)

// New fails: runsc runs on Linux only.
func (r *Runtime) New(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	return nil, &sandbox.CheckError{Runtime: Name, What: "gVisor runs on Linux only"}
}

// Leftovers finds nothing: nothing runs here.
func Leftovers(ctx context.Context) ([]string, error) { return nil, nil }

// Clean removes nothing.
func (r *Runtime) Clean(ctx context.Context) ([]string, error) { return nil, nil }
