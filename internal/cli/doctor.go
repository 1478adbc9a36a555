package cli

import "context"

// doctorMain is being written.
func doctorMain(ctx context.Context, io *IO, args []string) int {
	return fail(io, errNotYet("doctor"))
}
