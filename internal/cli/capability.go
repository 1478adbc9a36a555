package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/pinfold/pinfold/internal/capability"
	"github.com/pinfold/pinfold/internal/config"
	"github.com/pinfold/pinfold/internal/fault"
)

const capabilityUsage = `Usage: pinfold capability list
       pinfold capability add NAME...
       pinfold capability rm NAME...

Capabilities name what a sandbox's system must provide (postgres,
imagecodecs, xml...). add and rm edit the top-level capabilities: list of
the pinfold.yaml in effect; they refuse to with CI=true or --frozen.
`

func capabilityMain(ctx context.Context, io *IO, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(io.Stdout, capabilityUsage)
		if len(args) == 0 {
			return fault.ExitUsage
		}
		return 0
	}
	switch args[0] {
	case "list", "ls":
		tw := tabwriter.NewWriter(io.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tDEBIAN-12 PACKAGES (RUNTIME AND BUILD)\tDESCRIPTION")
		for _, n := range capability.Names() {
			c, _ := capability.Lookup(n)
			pkgs, _ := capability.Packages(n, capability.Debian12, true)
			fmt.Fprintf(tw, "%s\t%s\t%s\n", n, strings.Join(pkgs, " "), c.Description)
		}
		tw.Flush()
		return 0
	case "add", "rm":
		var frozen bool
		var path string
		fs := newFlagSet("capability " + args[0])
		fs.Bool(&frozen, "frozen", 0, "refuse to edit (as in CI)")
		fs.String(&path, "config", 'c', "FILE", "pinfold.yaml to edit (default: found walking up from the current directory)")
		names, err := fs.Parse(args[1:])
		if err != nil {
			return fail(io, err)
		}
		if len(names) == 0 {
			return fail(io, fault.New(fault.Usage, "pinfold capability "+args[0]+" needs a name", "", "pinfold capability list shows them", nil))
		}
		if frozen || os.Getenv("CI") == "true" {
			return fail(io, fault.New(fault.Usage, "pinfold capability "+args[0]+" edits pinfold.yaml, which is frozen here (CI=true or --frozen)",
				"", "edit the capabilities: list of pinfold.yaml in a commit", nil))
		}
		for _, n := range names {
			if _, ok := capability.Lookup(n); !ok && args[0] == "add" {
				_, err := capability.Packages(n, capability.Debian12, false)
				return fail(io, fault.New(fault.CapUnknown, err.Error(), "", "pinfold capability list shows the catalog", err))
			}
		}
		if path == "" {
			cwd, _ := os.Getwd()
			if path, err = config.Find(cwd); err != nil {
				return fail(io, err)
			}
			if path == "" {
				path = filepath.Join(cwd, "pinfold.yaml")
			}
		}
		if err := editCapabilities(path, args[0] == "add", names); err != nil {
			return fail(io, err)
		}
		fmt.Fprintf(io.Stdout, "%s: capabilities updated\n", path)
		return 0
	}
	return fail(io, fault.New(fault.Usage, "unknown command pinfold capability "+args[0], "", "use list, add or rm", nil))
}

// editCapabilities rewrites the top-level capabilities: list of the file at
// path (made if missing) and checks the result parses before replacing it.
func editCapabilities(path string, add bool, names []string) error {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		data = []byte("version: 1\n")
	} else if err != nil {
		return fault.New(fault.Store, err.Error(), "", "", err)
	}
	f, err := config.Parse(path, data)
	if err != nil {
		return err
	}
	caps := slices.Clone(f.Settings.Capabilities)
	for _, n := range names {
		i := slices.Index(caps, n)
		switch {
		case add && i < 0:
			caps = append(caps, n)
		case !add && i >= 0:
			caps = slices.Delete(caps, i, i+1)
		}
	}
	slices.Sort(caps)
	line := "capabilities: [" + strings.Join(caps, ", ") + "]"
	// Drop the old top-level key (with a block list under it), keep the rest.
	var out []string
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	replaced := false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "capabilities:") {
			for i+1 < len(lines) && (strings.HasPrefix(lines[i+1], " ") || strings.HasPrefix(lines[i+1], "-")) &&
				strings.HasPrefix(strings.TrimSpace(lines[i+1]), "-") {
				i++
			}
			if len(caps) > 0 {
				out = append(out, line)
			}
			replaced = true
			continue
		}
		out = append(out, l)
	}
	if !replaced && len(caps) > 0 {
		out = append(out, line)
	}
	text := strings.Join(out, "\n") + "\n"
	g, err := config.Parse(path, []byte(text))
	if err != nil || !slices.Equal(g.Settings.Capabilities, caps) && len(caps) > 0 {
		return fault.New(fault.Usage, "could not edit the capabilities of "+path+" safely", "", "edit its capabilities: list by hand", err)
	}
	tmp := path + ".pinfold-tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		return fault.New(fault.Store, err.Error(), "", "", err)
	}
	if fi, err := os.Stat(path); err == nil {
		os.Chmod(tmp, fi.Mode().Perm())
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fault.New(fault.Store, err.Error(), "", "", err)
	}
	return nil
}
