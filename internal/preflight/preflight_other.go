//go:build !linux

package preflight

import "context"

// Run fails: only Linux can run pinfold's sandboxes.
func Run(ctx context.Context, need Needs) error {
	if !need.Native && !need.Limits {
		return nil
	}
	return &Error{Checks: []Check{{ID: "os", Title: "operating system", Status: Fail,
		Detail: "pinfold's sandboxes need Linux", Fix: "run pinfold on Linux"}}}
}
