package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	initp "github.com/pinfold/pinfold/internal/backend/native"
	"github.com/pinfold/pinfold/internal/changeset"
	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/internal/fault"
)

func cleanCommand() command {
	return command{name: "clean", summary: "remove what killed runs left behind", use: "clean", interspersed: false,
		long: `Removes cgroups, temporary directories and podman or docker containers
that runs killed before they could clean up left behind (and pods on the cluster
of backend kubernetes, when one is configured), finishes their interrupted applies and
disks (--disk), removes the empty changesets of killed runs, and forgets recorded launches (see docs/cli.md). Sandboxes
still running are not touched.`,
		setup: func(fs *flagSet) runner {
			var trashOnly bool
			fs.Bool(&trashOnly, "trash", 0, "only delete the files of applied and discarded changesets")
			return func(ctx context.Context, io *IO, rest []string) int {
				if len(rest) > 0 {
					return fail(io, fault.New(fault.Usage, "pinfold clean takes no arguments", "", "run pinfold clean", nil))
				}
				dir, err := storeDir()
				if err != nil {
					return fail(io, err)
				}
				if trashOnly {
					if _, err := changeset.EmptyTrash(dir, false); err != nil {
						return fail(io, fault.New(fault.Store, "cleaning up: "+err.Error(), "", "", err))
					}
					return 0
				}
				// Interrupted applies and disks of killed runs are finished first.
				eng := engineFor(io)
				if err := eng.Recover(ctx); err != nil {
					return fail(io, err)
				}
				// Changesets of killed runs that hold nothing.
				gone, err := eng.RemoveEmptyInterrupted(ctx)
				for _, id := range gone {
					fmt.Fprintf(io.Stdout, "removed empty changeset %s (its run was killed)\n", id)
				}
				if err != nil {
					return fail(io, fault.New(fault.Store, "cleaning up: "+err.Error(), "", "", err))
				}
				if any, err := changeset.EmptyTrash(dir, true); any {
					fmt.Fprintln(io.Stdout, "removed the files of applied and discarded changesets")
					if err != nil {
						return fail(io, fault.New(fault.Store, "cleaning up: "+err.Error(), "", "", err))
					}
				}
				if n := initp.RemoveLaunches(filepath.Join(dir, "launch")); n > 0 {
					fmt.Fprintf(io.Stdout, "removed %d launch records\n", n)
				}
				initp.RemoveSpawnHints(dir)
				// What each runtime's killed sandboxes left (a sandbox.Cleaner).
				err = eng.Clean(ctx, func(what string) { fmt.Fprintf(io.Stdout, "removed %s\n", what) })
				var ce *engine.CleanError
				if errors.As(err, &ce) {
					return fail(io, fault.New(fault.Store, "cleaning up: "+ce.Err.Error(), "", cleanFix(ce.Runtime), err))
				}
				return 0
			}
		}}
}

// cleanFix is what to do when a runtime cannot clean up.
func cleanFix(runtime string) string {
	switch runtime {
	case "native", "gvisor":
		if os.Geteuid() == 0 {
			return "check what holds the path (findmnt, fuser -m PATH) and remove it by hand"
		}
		return "run pinfold clean as the user (or root) that ran the sandboxes"
	case "kubernetes":
		return "check that pinfold-kube check works"
	}
	return "check that `" + runtime + " ps` works"
}
