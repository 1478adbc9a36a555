package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/shim"
)

const shimHelp = `Shims route tools through pinfold: with the shim directory first in PATH,
"npm install" runs "pinfold run -- npm install", and pinfold's dispatch
rules pick the profile. install writes shims (default: npm npx pnpm yarn
pip pip3 uv poetry cargo go), ls lists them, uninstall removes them
(default: all). Files in the shim directory that pinfold did not write are
never replaced or removed.

The shim directory is $PINFOLD_SHIM_DIR, else /usr/local/lib/pinfold/shims
for root, else ~/.local/share/pinfold/shims.`

func shimCommand() command {
	// withDir declares --dir (on every subcommand) and runs f with the
	// shim directory.
	withDir := func(f func(io *IO, fs *flagSet, dir string, args []string) int) func(fs *flagSet) runner {
		return func(fs *flagSet) runner {
			var dir string
			fs.String(&dir, "dir", 0, "DIR", "the shim directory (default: see pinfold shim --help)")
			return func(ctx context.Context, io *IO, args []string) int {
				var err error
				if dir == "" {
					dir, err = shim.Dir()
				} else {
					dir, err = filepath.Abs(dir)
				}
				if err != nil {
					return fail(io, shimFault(err))
				}
				return f(io, fs, dir, args)
			}
		}
	}
	return command{name: "shim", summary: "route tools like npm through pinfold", use: "shim", long: shimHelp,
		sub: []command{
			{name: "install", summary: "write shims", use: "install [flags] [TOOL...]", interspersed: true, long: shimHelp,
				setup: withDir(func(io *IO, _ *flagSet, dir string, args []string) int { return shimInstall(io, dir, args) })},
			{name: "ls", aliases: []string{"list"}, summary: "list the shims", use: "ls [flags]", long: shimHelp,
				setup: withDir(func(io *IO, fs *flagSet, dir string, args []string) int {
					if len(args) > 0 {
						return fail(io, fs.errorf("pinfold shim ls takes no arguments"))
					}
					return shimList(io, dir)
				})},
			{name: "uninstall", aliases: []string{"rm"}, summary: "remove shims", use: "uninstall [flags] [TOOL...]", interspersed: true, long: shimHelp,
				setup: withDir(func(io *IO, _ *flagSet, dir string, args []string) int {
					removed, err := shim.Uninstall(dir, args)
					for _, p := range removed {
						fmt.Fprintf(io.Stdout, "removed %s\n", p)
					}
					if err != nil {
						return fail(io, shimFault(err))
					}
					if len(removed) == 0 {
						fmt.Fprintf(io.Stderr, "pinfold: no shims in %s\n", dir)
					}
					return 0
				})},
		}}
}

func shimInstall(io *IO, dir string, tools []string) int {
	if len(tools) == 0 {
		tools = shim.DefaultTools()
	}
	self, err := os.Executable()
	if err == nil {
		self, err = filepath.EvalSymlinks(self)
	}
	if err != nil {
		return fail(io, fault.New(fault.Internal, "finding the pinfold binary: "+err.Error(), "", "", err))
	}
	done, err := shim.Install(dir, self, tools)
	// Where the tools are once the shims are out of PATH's way.
	var clean []string
	for _, e := range filepath.SplitList(os.Getenv("PATH")) {
		if e != "" && filepath.Clean(e) != dir {
			clean = append(clean, e)
		}
	}
	for _, s := range done {
		note := ""
		if !onPath(clean, s.Tool) {
			note = " (" + s.Tool + " is not on PATH: the shim fails until it is installed)"
		}
		fmt.Fprintf(io.Stdout, "installed %s: runs %s run -- %s%s\n", s.Path, self, s.Tool, note)
	}
	if err != nil {
		return fail(io, shimFault(err))
	}
	fmt.Fprintf(io.Stdout, "\nAdd this line to your shell profile (~/.profile, ~/.bashrc or ~/.zshrc):\n  export PATH=\"%s:$PATH\"\n", dir)
	switch on, first := shim.OnPath(os.Getenv("PATH"), dir); {
	case first:
		fmt.Fprintln(io.Stdout, "PATH already starts with it.")
	case on:
		fmt.Fprintln(io.Stdout, "PATH has it, but not first: tools found in earlier directories bypass pinfold.")
	default:
		fmt.Fprintln(io.Stdout, "PATH does not have it yet.")
	}
	return 0
}

func onPath(dirs []string, tool string) bool {
	for _, d := range dirs {
		if st, err := os.Stat(filepath.Join(d, tool)); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return true
		}
	}
	return false
}

func shimList(io *IO, dir string) int {
	shims, err := shim.List(dir)
	if err != nil {
		return fail(io, shimFault(err))
	}
	if len(shims) == 0 {
		fmt.Fprintf(io.Stderr, "pinfold: no shims in %s\n", dir)
		return 0
	}
	width := 0
	for _, s := range shims {
		width = max(width, len(s.Tool))
	}
	for _, s := range shims {
		note := ""
		if _, err := exec.LookPath(s.Pinfold); err != nil {
			note = " (missing: run pinfold shim install again)"
		}
		fmt.Fprintf(io.Stdout, "%-*s  %s  -> %s run -- %s%s\n", width, s.Tool, s.Path, s.Pinfold, s.Tool, note)
	}
	return 0
}

// shimFault explains a shim error.
func shimFault(err error) error {
	fix := ""
	switch {
	case errors.Is(err, shim.ErrNotShim):
		fix = "pinfold only replaces and removes its own shims: move that file away, or use another --dir"
	case errors.Is(err, shim.ErrNoShim):
		fix = "see pinfold shim ls"
	case errors.Is(err, os.ErrPermission):
		fix = "run as root for the system-wide directory, or set PINFOLD_SHIM_DIR (or --dir) to a directory of your own"
	}
	return fault.New(fault.BadValue, strings.ReplaceAll(err.Error(), "\n", "; "), "", fix, err)
}
