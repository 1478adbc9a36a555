package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/store"
	"github.com/pinfold/pinfold/sandbox/native"
)

const baseUsage = `Usage: pinfold base ls [--json]
       pinfold base build debian-12 [--mirror URL]
       pinfold base pull HOST/REPO[:TAG]
       pinfold base rm ID...

Bases are the root filesystems sandboxes start from. tar: and oci: bases
are unpacked into the store on first use; debian-12 is built by pinfold
with debootstrap from the Debian mirror of the machine's apt sources (on
first use too). Each is named by the sha256 of its content.
`

func baseMain(ctx context.Context, io *IO, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(io.Stdout, baseUsage)
		if len(args) == 0 {
			return fault.ExitUsage
		}
		return 0
	}
	st, err := openStore()
	if err != nil {
		return fail(io, err)
	}
	switch args[0] {
	case "ls":
		return baseList(io, st, args[1:])
	case "build":
		var mirror string
		var quiet bool
		fs := newFlagSet("base build")
		fs.String(&mirror, "mirror", 0, "URL", "Debian mirror (default: the machine's apt sources)")
		fs.Bool(&quiet, "quiet", 'q', "print only errors")
		rest, err := fs.Parse(args[1:])
		if err != nil {
			return fail(io, err)
		}
		if fs.help || len(rest) != 1 {
			fmt.Fprint(io.Stdout, baseUsage)
			return fault.ExitUsage
		}
		eng := engineFor(io)
		eng.Report.(*reporter).quiet = quiet
		b, err := eng.BuildBase(ctx, st, rest[0], mirror)
		if err != nil {
			return fail(io, err)
		}
		fmt.Fprintf(io.Stdout, "%s %s\n", rest[0], b.Digest)
		return 0
	case "pull":
		if len(args) != 2 || !store.IsReference(args[1]) {
			return fail(io, fault.New(fault.Usage, "pinfold base pull needs a registry reference", "", "like registry.example.org/team/app:1.0", nil))
		}
		var shift uint32
		if os.Geteuid() == 0 {
			shift = native.HostIDBase
		}
		rep := newReporter(io.Stderr, st.Dir())
		rep.Progress("pull "+args[1], engine.Step{Phase: "Pulling", Item: args[1]})
		b, err := st.PullBase(ctx, args[1], store.ImportOptions{UIDShift: shift}, true)
		rep.Done("pull "+args[1], err)
		if err != nil {
			return fail(io, fault.New(fault.BadBase, err.Error(), "", "check the reference and that the registry is reachable", err))
		}
		fmt.Fprintf(io.Stdout, "%s %s\n", args[1], b.Digest)
		return 0
	case "rm":
		if len(args) < 2 {
			return fail(io, fault.New(fault.Usage, "pinfold base rm needs an id", "", "pinfold base ls lists the ids", nil))
		}
		code := 0
		for _, id := range args[1:] {
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
	return fail(io, fault.New(fault.Usage, "unknown command pinfold base "+args[0], "", "use ls, build or rm", nil))
}

func baseList(io *IO, st *store.Store, args []string) int {
	var asJSON bool
	fs := newFlagSet("base ls")
	fs.Bool(&asJSON, "json", 0, "print JSON")
	if _, err := fs.Parse(args); err != nil {
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
		b, _ := json.MarshalIndent(rows, "", "  ")
		io.Stdout.Write(append(b, '\n'))
		return 0
	}
	tw := tabwriter.NewWriter(io.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tID\tCREATED\tSOURCE")
	for _, b := range bases {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", b.Kind, strings.TrimPrefix(b.ID, "sha256:")[:12], b.Created, b.Source)
	}
	tw.Flush()
	return 0
}

// gcMain removes what nothing in the store references.
func gcMain(ctx context.Context, io *IO, args []string) int {
	var dry bool
	fs := newFlagSet("gc")
	fs.Bool(&dry, "dry-run", 'n', "only say what would be removed")
	if _, err := fs.Parse(args); err != nil {
		return fail(io, err)
	}
	if fs.help {
		fmt.Fprint(io.Stdout, "Usage: pinfold gc [--dry-run]\n\nRemoves images whose base is gone, bases no image is built on (keeping the\nnewest build of each curated base), and work directories of imports that\ndied. Nothing a running sandbox uses is removed; changesets are kept.\n\nFlags:\n")
		fs.Usage(io.Stdout)
		return 0
	}
	st, err := openStore()
	if err != nil {
		return fail(io, err)
	}
	removed, err := st.GC(dry)
	verb := "removed"
	if dry {
		verb = "would remove"
	}
	for _, r := range removed {
		fmt.Fprintf(io.Stdout, "%s %s\n", verb, r)
	}
	if err != nil {
		return fail(io, fault.New(fault.Store, "collecting: "+err.Error(), "", "", err))
	}
	return 0
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
