package cli

import "context"

// shimMain is being written.
func shimMain(ctx context.Context, io *IO, args []string) int {
	return fail(io, errNotYet("shim"))
}
