//go:build !linux

package doctor

import (
	"context"
	"errors"
)

type host struct{}

func unsupported() Check {
	return Check{ID: "os", Title: "operating system", Status: Fail,
		Detail: "pinfold's sandboxes need Linux", Fix: "run pinfold on Linux"}
}

// Run reports that only Linux can run pinfold's sandboxes.
func Run(ctx context.Context, opt Options) *Report {
	return &Report{UID: -1, Checks: []Check{unsupported()}}
}

// Apply has nothing to apply outside Linux.
func Apply(ctx context.Context, c Check) (string, error) {
	return "", errors.New(c.ID + ": no fix pinfold can apply")
}
