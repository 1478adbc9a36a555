package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/pinfold/pinfold/internal/capability"
	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/internal/fault"
)

// explainMain prints what a run's sandbox is made of.
func explainMain(ctx context.Context, io *IO, args []string) int {
	var o runOptions
	fs := runFlags("explain", &o)
	rest, err := fs.Parse(args)
	if err != nil {
		return fail(io, err)
	}
	if fs.help {
		fmt.Fprint(io.Stdout, "Usage: pinfold explain [flags] [-- CMD [ARGS...]]\n\nPrints the base, the capabilities with where each comes from (explicit,\nlockfile, ELF scan), and the sandbox id of the run the same flags and\ncommand would make. Nothing is built.\n\nFlags:\n")
		fs.Usage(io.Stdout)
		return 0
	}
	if len(rest) == 0 {
		rest = []string{"true"}
	}
	eng := engineFor(io)
	p, err := resolve(ctx, eng, &o, rest)
	if err != nil {
		return fail(io, classify(err, nil))
	}
	st, err := eng.OpenStore()
	if err != nil {
		return fail(io, err)
	}
	sys, err := eng.Describe(ctx, st, p)
	if err != nil {
		return fail(io, err)
	}
	w := io.Stdout
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
	return 0
}

// imagesMain lists the derived images.
func imagesMain(ctx context.Context, io *IO, args []string) int {
	st, err := openStore()
	if err != nil {
		return fail(io, err)
	}
	imgs, err := st.Images()
	if err != nil {
		return fail(io, fault.New(fault.Store, err.Error(), "", "", err))
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
