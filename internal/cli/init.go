package cli

import "context"

// initMain is being written.
func initMain(ctx context.Context, io *IO, args []string) int {
	return fail(io, errNotYet("init"))
}
