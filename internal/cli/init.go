package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/pinfold/pinfold/internal/config"
	"github.com/pinfold/pinfold/internal/fault"
)

const initUsage = `Usage: pinfold init [--template NAME]

Writes a commented starter pinfold.yaml in the current directory: an
install profile (network, lockfile required), a test profile (no
network), a cache for the tool's downloads and dispatch rules for its
commands. It never overwrites a pinfold.yaml.

Without --template, the files here decide: package.json -> npm,
uv.lock -> uv, poetry.lock -> poetry, requirements.txt or
pyproject.toml -> pip, Cargo.toml -> cargo, go.mod -> go, else generic.

Flags:
`

func initCommand() command {
	return command{name: "init", summary: "write a starter pinfold.yaml", use: "init [--template NAME]",
		long: helpText(initUsage),
		setup: func(fs *flagSet) runner {
			var template string
			fs.String(&template, "template", 't', "NAME", "starter file: "+strings.Join(config.Templates(), ", "))
			return func(ctx context.Context, io *IO, rest []string) int {
				if len(rest) > 0 {
					return fail(io, initUsageError(fmt.Sprintf("unexpected argument %q", rest[0]), "pinfold init [--template NAME]"))
				}
				cwd, err := os.Getwd()
				if err != nil {
					return fail(io, fault.New(fault.Internal, "cannot find the current directory", err.Error(), "", err))
				}
				path, name, reason, err := writeTemplate(cwd, template)
				if err != nil {
					return fail(io, err)
				}
				fmt.Fprintf(io.Stdout, "wrote %s (%s template%s)\n", path, name, reason)
				if parent := filepath.Dir(cwd); parent != cwd {
					if outer, err := config.Find(parent); err == nil && outer != "" {
						fmt.Fprintf(io.Stdout, "note: %s no longer applies in this directory; the new file does\n", outer)
					}
				}
				fmt.Fprintf(io.Stdout, "review it, then see what a command gets with: pinfold plan -- COMMAND\n")
				return 0
			}
		}}
}

// writeTemplate writes the template (detected from dir's files when
// name is empty) to dir/pinfold.yaml, refusing to replace a file there.
// reason says why the template was chosen.
func writeTemplate(dir, name string) (path, chosen, reason string, err error) {
	if name == "" {
		var file string
		name, file = config.DetectTemplate(func(f string) bool {
			_, err := os.Stat(filepath.Join(dir, f))
			return err == nil
		})
		if file != "" {
			reason = ", from " + file
		}
	}
	data, ok := config.Template(name)
	if !ok {
		e := fault.New(fault.BadValue, fmt.Sprintf("unknown template %q", name), "",
			"use one of "+strings.Join(config.Templates(), ", "), nil)
		e.Exit = fault.ExitUsage
		return "", "", "", e
	}
	path = filepath.Join(dir, config.FileName)
	// O_EXCL: the check and the creation are one step, so a file that
	// appears meanwhile is not overwritten either.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return "", "", "", fault.New(fault.InitRefused, path+" already exists",
			"pinfold init never overwrites a policy file",
			"edit the existing file, or move it away and run pinfold init again", err)
	}
	if err != nil {
		return "", "", "", fault.New(fault.InitRefused, "cannot write "+path, initErrText(err),
			"run pinfold init in a directory you can write", err)
	}
	if _, err = f.Write(data); err == nil {
		err = f.Close()
	} else {
		f.Close()
	}
	if err != nil {
		os.Remove(path)
		return "", "", "", fault.New(fault.InitRefused, "cannot write "+path, initErrText(err), "", err)
	}
	return path, name, reason, nil
}

func initUsageError(what, fix string) error {
	e := fault.New(fault.Usage, what, "", fix, nil)
	e.Exit = fault.ExitUsage
	return e
}

// initErrText is an error's message without the path a *fs.PathError
// repeats.
func initErrText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
