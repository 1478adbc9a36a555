package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	initp "github.com/pinfold/pinfold/internal/backend/native"
	"github.com/pinfold/pinfold/internal/changeset"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/sandbox/container"
	"github.com/pinfold/pinfold/sandbox/gvisor"
	"github.com/pinfold/pinfold/sandbox/kubernetes"
	"github.com/pinfold/pinfold/sandbox/native"
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
				removed, err := native.Clean(ctx, "")
				for _, r := range removed {
					fmt.Fprintf(io.Stdout, "removed %s\n", r)
				}
				if err != nil {
					fix := "run pinfold clean as the user (or root) that ran the sandboxes"
					if os.Geteuid() == 0 {
						fix = "check what holds the path (findmnt, fuser -m PATH) and remove it by hand"
					}
					return fail(io, fault.New(fault.Store, "cleaning up: "+err.Error(), "", fix, err))
				}
				// Containers of killed runs, in the engines that are here.
				for _, rt := range []*container.Runtime{container.Podman(), container.Docker()} {
					names, err := rt.Clean(ctx)
					for _, n := range names {
						fmt.Fprintf(io.Stdout, "removed %s container %s\n", rt.Name(), n)
					}
					if err != nil {
						return fail(io, fault.New(fault.Store, "cleaning up: "+err.Error(), "", "check that `"+rt.Name()+" ps` works", err))
					}
				}
				// gVisor sandboxes of killed runs.
				names, err := gvisor.Clean(ctx)
				for _, n := range names {
					fmt.Fprintf(io.Stdout, "removed gvisor sandbox %s\n", n)
				}
				if err != nil {
					return fail(io, fault.New(fault.Store, "cleaning up: "+err.Error(), "", "check what holds the path (findmnt, fuser -m PATH) and remove it by hand", err))
				}
				// Pods of killed runs (and their secrets and policies) on the
				// cluster pinfold is configured for.
				if kr := kubernetes.Default(); kr.Configured() {
					names, err := kr.Clean(ctx)
					for _, n := range names {
						fmt.Fprintf(io.Stdout, "removed kubernetes %s\n", n)
					}
					if err != nil {
						return fail(io, fault.New(fault.Store, "cleaning up: "+err.Error(), "", "check that pinfold-kube check works", err))
					}
				}
				return 0
			}
		}}
}
