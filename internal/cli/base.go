package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/store"
)

func baseCommand() command {
	return command{name: "base", summary: "list, build, pull and remove bases", use: "base",
		long: `Bases are the root filesystems sandboxes start from. tar: and oci: bases
are unpacked into the store on first use; debian-12 is built by pinfold
with debootstrap from the Debian mirror of the machine's apt sources (on
first use too). Each is named by the sha256 of its content.`,
		sub: []command{
			{name: "ls", aliases: []string{"list"}, summary: "list the bases in the store", use: "ls [--json]",
				setup: func(fs *flagSet) runner {
					var asJSON bool
					fs.Bool(&asJSON, "json", 0, "print JSON")
					return func(ctx context.Context, io *IO, args []string) int {
						if len(args) > 0 {
							return fail(io, fs.errorf("pinfold base ls takes no arguments"))
						}
						return baseList(io, asJSON)
					}
				}},
			{name: "build", summary: "build a curated base (debian-12)", use: "build debian-12 [--mirror URL]",
				setup: func(fs *flagSet) runner {
					var mirror string
					var quiet bool
					fs.String(&mirror, "mirror", 0, "URL", "Debian mirror (default: the machine's apt sources)")
					fs.Bool(&quiet, "quiet", 'q', "print only errors")
					return func(ctx context.Context, io *IO, args []string) int {
						if len(args) != 1 {
							return fail(io, fs.errorf("pinfold base build takes one base: debian-12"))
						}
						st, err := openStore()
						if err != nil {
							return fail(io, err)
						}
						eng := engineFor(io)
						eng.Report.(*reporter).quiet = quiet
						b, err := eng.BuildBase(ctx, st, args[0], mirror)
						if err != nil {
							return fail(io, err)
						}
						fmt.Fprintf(io.Stdout, "%s %s\n", args[0], b.Digest)
						return 0
					}
				}},
			{name: "pull", summary: "pull an image from a registry as a base", use: "pull HOST/REPO[:TAG]",
				setup: func(fs *flagSet) runner {
					return func(ctx context.Context, io *IO, args []string) int {
						if len(args) != 1 || !store.IsReference(args[0]) {
							return fail(io, fault.New(fault.Usage, "pinfold base pull needs a registry reference", "", "like registry.example.org/team/app:1.0", nil))
						}
						st, err := openStore()
						if err != nil {
							return fail(io, err)
						}
						shift := store.Shift()
						rep := newReporter(io.Stderr, st.Dir())
						rep.Progress("pull "+args[0], engine.Step{Phase: "Pulling", Item: args[0]})
						b, err := st.PullBase(ctx, args[0], store.ImportOptions{UIDShift: shift}, true)
						rep.Done("pull "+args[0], err)
						if err != nil {
							return fail(io, fault.New(fault.BadBase, err.Error(), "", "check the reference and that the registry is reachable", err))
						}
						fmt.Fprintf(io.Stdout, "%s %s\n", args[0], b.Digest)
						return 0
					}
				}},
			{name: "rm", aliases: []string{"remove"}, summary: "remove bases from the store", use: "rm ID...",
				setup: func(fs *flagSet) runner {
					return func(ctx context.Context, io *IO, args []string) int {
						if len(args) == 0 {
							return fail(io, fault.New(fault.Usage, "pinfold base rm needs an id", "", "pinfold base ls lists the ids", nil))
						}
						st, err := openStore()
						if err != nil {
							return fail(io, err)
						}
						code := 0
						for _, id := range args {
							b, err := st.FindBase(id)
							if err == nil {
								err = st.RemoveBase(b)
							}
							if err != nil {
								code = fail(io, fault.New(fault.Store, err.Error(), "", "", err))
								continue
							}
							fmt.Fprintf(io.Stdout, "removed %s %s\n", b.Kind, b.ID)
						}
						return code
					}
				}},
		}}
}

func baseList(io *IO, asJSON bool) int {
	st, err := openStore()
	if err != nil {
		return fail(io, err)
	}
	bases, err := st.Bases()
	if err != nil {
		return fail(io, fault.New(fault.Store, "listing bases: "+err.Error(), "", "", err))
	}
	if asJSON {
		type row struct {
			Kind    string `json:"kind"`
			ID      string `json:"id"`
			Source  string `json:"source"`
			Created string `json:"created"`
		}
		rows := []row{}
		for _, b := range bases {
			rows = append(rows, row{b.Kind, b.ID, b.Source, b.Created})
		}
		return printJSON(io, rows)
	}
	tw := tabwriter.NewWriter(io.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tID\tCREATED\tSOURCE")
	for _, b := range bases {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", b.Kind, strings.TrimPrefix(b.ID, "sha256:")[:12], b.Created, b.Source)
	}
	tw.Flush()
	return 0
}

func gcCommand() command {
	return command{name: "gc", summary: "remove unreferenced images and bases from the store", use: "gc [--dry-run] [--json]",
		long: `Removes images whose base is gone, bases no image is built on (keeping the
newest build of each curated base), and work directories of imports that
died. Nothing a running sandbox uses is removed; changesets are kept.`,
		setup: func(fs *flagSet) runner {
			var dry, asJSON bool
			fs.Bool(&dry, "dry-run", 'n', "only say what would be removed")
			fs.Bool(&asJSON, "json", 0, "print what was (or would be) removed as JSON")
			return func(ctx context.Context, io *IO, args []string) int {
				if len(args) > 0 {
					return fail(io, fs.errorf("pinfold gc takes no arguments"))
				}
				st, err := openStore()
				if err != nil {
					return fail(io, err)
				}
				removed, gcErr := st.GC(dry)
				if asJSON {
					if removed == nil {
						removed = []string{}
					}
					printJSON(io, struct {
						DryRun  bool     `json:"dry_run"`
						Removed []string `json:"removed"`
					}{dry, removed})
				} else {
					verb := "removed"
					if dry {
						verb = "would remove"
					}
					for _, r := range removed {
						fmt.Fprintf(io.Stdout, "%s %s\n", verb, r)
					}
				}
				if gcErr != nil {
					return fail(io, fault.New(fault.Store, "collecting: "+gcErr.Error(), "", "", gcErr))
				}
				return 0
			}
		}}
}

// openStore opens pinfold's store, with a coded error when it cannot.
func openStore() (*store.Store, error) {
	dir, err := storeDir()
	if err != nil {
		return nil, err
	}
	st, err := store.Open(dir)
	if err != nil {
		return nil, fault.New(fault.Store, "opening the store: "+err.Error(), "", "check the permissions of "+dir, err)
	}
	return st, nil
}
