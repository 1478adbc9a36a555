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

func capabilityCommand() command {
	edit := func(add bool) func(fs *flagSet) runner {
		return func(fs *flagSet) runner {
			var frozen bool
			var path string
			fs.Bool(&frozen, "frozen", 0, "refuse to edit (as in CI)")
			fs.String(&path, "config", 'c', "FILE", "pinfold.yaml to edit (default: found walking up from the current directory)")
			return func(ctx context.Context, io *IO, names []string) int {
				return editMain(io, add, frozen, path, names)
			}
		}
	}
	return command{name: "capability", summary: "list capabilities, add them to or remove them from pinfold.yaml", use: "capability",
		long: `Capabilities name what a sandbox's system must provide (postgres,
imagecodecs, xml...). add and rm edit the top-level capabilities: list of
the pinfold.yaml in effect; they refuse to with CI=true or --frozen.`,
		sub: []command{
			{name: "list", aliases: []string{"ls"}, summary: "list the capabilities and their packages", use: "list [--json]",
				setup: func(fs *flagSet) runner {
					var asJSON bool
					fs.Bool(&asJSON, "json", 0, "print JSON")
					return func(ctx context.Context, io *IO, args []string) int {
						if len(args) > 0 {
							return fail(io, fs.errorf("pinfold capability list takes no arguments"))
						}
						return capabilityList(io, asJSON)
					}
				}},
			{name: "add", summary: "add capabilities to pinfold.yaml", use: "add NAME... [flags]", interspersed: true, setup: edit(true),
				complete: capability.Names},
			{name: "rm", aliases: []string{"remove"}, summary: "remove capabilities from pinfold.yaml", use: "rm NAME... [flags]", interspersed: true,
				setup: edit(false), complete: capability.Names},
		}}
}

func capabilityList(io *IO, asJSON bool) int {
	type row struct {
		Name        string   `json:"name"`
		Packages    []string `json:"packages"`
		Description string   `json:"description"`
	}
	var rows []row
	for _, n := range capability.Names() {
		c, _ := capability.Lookup(n)
		pkgs, _ := capability.Packages(n, capability.Debian12, true)
		rows = append(rows, row{n, pkgs, c.Description})
	}
	if asJSON {
		return printJSON(io, rows)
	}
	tw := tabwriter.NewWriter(io.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDEBIAN-12 PACKAGES (RUNTIME AND BUILD)\tDESCRIPTION")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Name, strings.Join(r.Packages, " "), r.Description)
	}
	tw.Flush()
	return 0
}

// editMain adds capabilities to (or removes them from) the config.
func editMain(io *IO, add bool, frozen bool, path string, names []string) int {
	verb := "rm"
	if add {
		verb = "add"
	}
	if len(names) == 0 {
		return fail(io, fault.New(fault.Usage, "pinfold capability "+verb+" needs a name", "", "pinfold capability list shows them", nil))
	}
	if frozen || os.Getenv("CI") == "true" {
		return fail(io, fault.New(fault.Usage, "pinfold capability "+verb+" edits pinfold.yaml, which is frozen here (CI=true or --frozen)",
			"", "edit the capabilities: list of pinfold.yaml in a commit", nil))
	}
	for _, n := range names {
		if _, ok := capability.Lookup(n); !ok && add {
			_, err := capability.Packages(n, capability.Debian12, false)
			return fail(io, fault.New(fault.CapUnknown, err.Error(), "", "pinfold capability list shows the catalog", err))
		}
	}
	if path == "" {
		cwd, _ := os.Getwd()
		d, err := config.Discover(cwd)
		if err != nil {
			return fail(io, err)
		}
		if d.Ignored != nil {
			// Not edited, as not obeyed: the new file below it applies.
			fmt.Fprintf(io.Stderr, "pinfold: %s\n", d.Ignored.Message())
		}
		path = d.Path
		if path == "" {
			path = filepath.Join(cwd, "pinfold.yaml")
		}
	}
	if err := editCapabilities(path, add, names); err != nil {
		return fail(io, err)
	}
	fmt.Fprintf(io.Stdout, "%s: capabilities updated\n", path)
	return 0
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
