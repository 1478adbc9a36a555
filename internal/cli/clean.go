package cli

import (
	"context"
	"fmt"
	"path/filepath"

	initp "github.com/pinfold/pinfold/internal/backend/native"
	"github.com/pinfold/pinfold/internal/changeset"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/sandbox/native"
)

func cleanMain(ctx context.Context, io *IO, args []string) int {
	var trashOnly bool
	fs := newFlagSet("clean")
	fs.Bool(&trashOnly, "trash", 0, "only delete the files of applied and discarded changesets")
	rest, err := fs.Parse(args)
	if err != nil {
		return fail(io, err)
	}
	if fs.help {
		fmt.Fprint(io.Stdout, "Usage: pinfold clean\n\nRemoves cgroups and temporary directories that runs killed before they\ncould clean up left behind, finishes their interrupted applies and\ndisks (--disk), and forgets recorded launches (see docs/cli.md). Sandboxes\nstill running are not touched.\n\nFlags:\n")
		fs.Usage(io.Stdout)
		return 0
	}
	if len(rest) > 0 {
		return fail(io, fault.New(fault.Usage, "pinfold clean takes no arguments", "", "run pinfold clean", nil))
	}
	dir, err := storeDir()
	if err != nil {
		return fail(io, err)
	}
	if trashOnly {
		if _, err := changeset.EmptyTrash(dir); err != nil {
			return fail(io, fault.New(fault.Store, "cleaning up: "+err.Error(), "", "", err))
		}
		return 0
	}
	// Interrupted applies and disks of killed runs are finished first.
	if err := engineFor(io).Recover(ctx); err != nil {
		return fail(io, err)
	}
	if any, err := changeset.EmptyTrash(dir); any {
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
		return fail(io, fault.New(fault.Store, "cleaning up: "+err.Error(), "", "run pinfold clean as the user (or root) that ran the sandboxes", err))
	}
	return 0
}
