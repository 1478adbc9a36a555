package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/pinfold/pinfold/internal/capability"
	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/pack"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/internal/store"
	"github.com/pinfold/pinfold/sandbox"
)

func explainCommand() command {
	return command{name: "explain", summary: "print a run's base, capabilities and sandbox id", use: "explain [flags] [-- COMMAND [ARGS...]]",
		long: `Prints the base, the capabilities with where each comes from (explicit,
lockfile, ELF scan), and the sandbox id of the run the same flags and
command would make. Nothing is built.`,
		setup: func(fs *flagSet) runner {
			var o runOptions
			runFlags(fs, "explain", &o)
			return func(ctx context.Context, io *IO, args []string) int { return explainMain(ctx, io, &o, args) }
		}}
}

// explainMain prints what a run's sandbox is made of.
func explainMain(ctx context.Context, io *IO, o *runOptions, rest []string) int {
	if len(rest) == 0 {
		rest = []string{"true"}
	}
	rest, err := appRun(o, rest)
	if err != nil {
		return fail(io, err)
	}
	eng := engineFor(io)
	p, err := resolve(ctx, eng, o, rest)
	if err != nil {
		return fail(io, engine.Classify(err, nil))
	}
	packed := packedFrom(p.Sandbox.Base)
	st, err := eng.OpenStore()
	if err != nil {
		return fail(io, err)
	}
	sys, err := eng.Describe(ctx, st, p)
	if err != nil {
		return fail(io, err)
	}
	w := io.Stdout
	if o.json {
		return printJSON(io, struct {
			Base string `json:"base"`
			*plan.System
			// PackedSandboxID is the sandbox id an image file pinfold
			// packed was made from.
			PackedSandboxID string `json:"packed_sandbox_id,omitempty"`
		}{engine.BaseName(p.Sandbox.Base), sys, packed})
	}
	baseID := sys.BaseID
	if baseID == "" {
		baseID = "(not in the store yet: the first run builds or imports it)"
	}
	fmt.Fprintf(w, "base:          %s  %s\n", engine.BaseName(p.Sandbox.Base), baseID)
	if len(sys.Findings) == 0 {
		fmt.Fprintf(w, "capabilities:  none\n")
	} else {
		fmt.Fprintf(w, "capabilities:\n")
		for _, f := range sys.Findings {
			name := f.Capability
			if name == "" {
				name = "(none provides it)"
			}
			if f.Source == string(capability.Explicit) {
				fmt.Fprintf(w, "  %-14s explicit: %s\n", name, p.Sources["capabilities"])
				continue
			}
			fmt.Fprintf(w, "  %-14s %s: %s\n", name, f.Source, f.Evidence)
		}
	}
	if len(sys.Packages) > 0 {
		fmt.Fprintf(w, "packages:      %s\n", strings.Join(sys.Packages, " "))
	}
	switch {
	case sys.SandboxID == "":
		fmt.Fprintf(w, "sandbox id:    (known once the base is in the store)\n")
	case sys.Image != "":
		fmt.Fprintf(w, "sandbox id:    %s (image built %s)\n", sys.SandboxID, sys.ImageCreated)
	case len(sys.Capabilities) > 0:
		fmt.Fprintf(w, "sandbox id:    %s (image not built yet: the first run builds it)\n", sys.SandboxID)
	default:
		fmt.Fprintf(w, "sandbox id:    %s\n", sys.SandboxID)
	}
	if packed != "" {
		fmt.Fprintf(w, "packed from:   sandbox id %s\n", packed)
	}
	return 0
}

// packedFrom is the sandbox id an image file pinfold packed (an app, or
// pack image's FILE.tar) was made from, from its signed config's labels;
// "" for other bases.
func packedFrom(b sandbox.Base) string {
	if b.Kind != sandbox.BaseOCI || b.Path == "" {
		return ""
	}
	if st, err := os.Stat(b.Path); err != nil || !st.Mode().IsRegular() {
		return ""
	}
	a, err := pack.ReadArchive(b.Path)
	if err != nil {
		return ""
	}
	return a.Config.Config.Labels[pack.LabelSandboxID]
}

func imagesCommand() command {
	return command{name: "images", summary: "list the images capabilities made", use: "images [--json]",
		long: "Lists the images pinfold built for capabilities: their sandbox id, base, capabilities and when.",
		setup: func(fs *flagSet) runner {
			var asJSON bool
			fs.Bool(&asJSON, "json", 0, "print JSON")
			return func(ctx context.Context, io *IO, args []string) int {
				if len(args) > 0 {
					return fail(io, fs.errorf("pinfold images takes no arguments"))
				}
				return imagesMain(io, asJSON)
			}
		}}
}

// imagesMain lists the derived images.
func imagesMain(io *IO, asJSON bool) int {
	st, err := openStore()
	if err != nil {
		return fail(io, err)
	}
	imgs, err := st.Images()
	if err != nil {
		return fail(io, fault.New(fault.Store, err.Error(), "", "", err))
	}
	if asJSON {
		if imgs == nil {
			imgs = []store.ImageInfo{}
		}
		return printJSON(io, imgs)
	}
	tw := tabwriter.NewWriter(io.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SANDBOX ID\tBASE\tCAPABILITIES\tCREATED")
	for _, m := range imgs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", engine.Short(m.ID), engine.Short(m.Base), strings.Join(m.Capabilities, ","), m.Created)
	}
	tw.Flush()
	return 0
}

// suggestCapabilities turns loader errors in a failed run's output into
// the capability that fixes them.
func suggestCapabilities(io *IO, missing []capability.Finding) {
	for _, f := range missing {
		if f.Capability == "" {
			fmt.Fprintf(io.Stderr, "pinfold: %s %s\n  Why: a system library the command needs is not in the sandbox, and no capability provides it\n  Fix: use a base that has it, or mount it in\n",
				fault.MissingLibrary, f.Evidence)
			continue
		}
		fmt.Fprintf(io.Stderr, "pinfold: %s %s\n  Why: a system library the command needs is not in the sandbox\n  Fix: add the capability that provides it: capabilities: [%s] in pinfold.yaml (with base: debian-12)\n",
			fault.MissingLibrary, f.Evidence, f.Capability)
	}
}

// printJSON writes v as indented JSON on stdout.
func printJSON(io *IO, v any) int {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fail(io, err)
	}
	io.Stdout.Write(append(b, '\n'))
	return 0
}
