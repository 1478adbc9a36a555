// Package cli is pinfold's command line: one file per subcommand, each
// parsing its flags and calling into the libraries. Errors become coded
// messages and exit statuses here and nowhere else.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/pinfold/pinfold/internal/fault"
)

// Version is set at build time with -ldflags "-X ...cli.Version=...".
var Version = "dev"

// IO is what a command talks to.
type IO struct {
	Stdin          *os.File
	Stdout, Stderr *os.File
}

type command struct {
	name, summary string
	run           func(ctx context.Context, io *IO, args []string) int
}

func commands() []command {
	return []command{
		{"run", "run a command in a sandbox", runMain},
		{"plan", "print what run would do, and why", planMain},
		{"changes", "list changesets", changesMain},
		{"diff", "show what a changeset changes", diffMain},
		{"apply", "write a changeset into the workspace", applyMain},
		{"discard", "throw a changeset away", discardMain},
		{"export", "write a changeset as an OCI layer", exportMain},
		{"init", "write a starter pinfold.yaml", initMain},
		{"doctor", "check this host can run sandboxes", doctorMain},
		{"shim", "route tools like npm through pinfold", shimMain},
		{"base", "list, build and remove bases", baseMain},
		{"images", "list the images capabilities made", imagesMain},
		{"gc", "remove unreferenced images and bases from the store", gcMain},
		{"explain", "print a run's base, capabilities and sandbox id", explainMain},
		{"capability", "list capabilities, add them to or remove them from pinfold.yaml", capabilityMain},
		{"clean", "remove what killed runs left behind", cleanMain},
		{"version", "print the version", versionMain},
	}
}

// Main runs pinfold with args (without the program name) and returns the
// exit status.
func Main(ctx context.Context, io *IO, args []string) int {
	if len(args) == 0 {
		usage(io.Stderr)
		return fault.ExitUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		usage(io.Stdout)
		return 0
	case "-v", "--version":
		return versionMain(ctx, io, nil)
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, io, args[1:])
		}
	}
	return fail(io, fault.New(fault.Usage, fmt.Sprintf("unknown command %q", args[0]), "", "see pinfold --help", nil))
}

func usage(w io.Writer) {
	fmt.Fprint(w, "pinfold runs commands in a sandbox.\n\nUsage:\n  pinfold COMMAND [flags]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nRun 'pinfold COMMAND --help' for a command's flags.\n")
}

// fail prints err as a coded message and returns its exit status.
func fail(io *IO, err error) int {
	var fe *fault.Error
	if !errors.As(err, &fe) {
		fe = fault.New(fault.Internal, err.Error(), "", "", err)
	}
	fmt.Fprintf(io.Stderr, "pinfold: %s\n", fe.Error())
	return fault.ExitCode(fe)
}

func versionMain(_ context.Context, io *IO, _ []string) int {
	fmt.Fprintf(io.Stdout, "pinfold %s\n", Version)
	return 0
}
