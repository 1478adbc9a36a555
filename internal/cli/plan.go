package cli

import "context"

// planMain is being written.
func planMain(ctx context.Context, io *IO, args []string) int {
	return fail(io, errNotYet("plan"))
}
