// Package cli is pinfold's command line: one file per subcommand, each
// declaring its flags and calling the engine. Errors become coded
// messages and exit statuses here and nowhere else.
//
// The commands are a cobra tree (help, `pinfold help CMD`, completion
// scripts for bash, zsh and fish, did-you-mean for commands and flags).
// A command is a setup function that declares its flags and returns what
// runs with the arguments; a plain `pinfold run` builds only the run
// command, so the tree costs the run path little (docs/benchmarks.md).
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/sandbox/kubernetes"
)

// Version is set at build time with -ldflags "-X ...cli.Version=...".
var Version = "dev"

// IO is what a command talks to.
type IO struct {
	Stdin          *os.File
	Stdout, Stderr *os.File
	// args is the command line Main was given, for run's launch records.
	args []string
}

// runner runs a command with its arguments once its flags are parsed and
// returns the exit status.
type runner func(ctx context.Context, io *IO, args []string) int

// command is one pinfold command.
type command struct {
	name    string
	aliases []string
	summary string
	// use is how it is called, after "pinfold": "apply [ID] [PATHS...]".
	use string
	// long is its help text (the summary when empty).
	long string
	// interspersed lets flags follow the arguments (diff, apply); commands
	// that run a command of their own (run, plan) stop at the first
	// argument that is not a flag, so that the command's flags are its own.
	interspersed bool
	// setup declares the flags and returns what runs; nil for a group.
	setup func(fs *flagSet) runner
	sub   []command
	// complete offers values for the arguments (changeset ids...).
	complete func() []string
	// hidden keeps it out of help and completion (pinfold's own use).
	hidden bool
}

func commands() []command {
	return []command{
		runCommand(),
		planCommand(),
		changesCommand(),
		diffCommand(),
		applyCommand(),
		discardCommand(),
		exportCommand(),
		initCommand(),
		doctorCommand(),
		shimCommand(),
		baseCommand(),
		imagesCommand(),
		gcCommand(),
		explainCommand(),
		capabilityCommand(),
		packCommand(),
		appCommand(),
		cleanCommand(),
		sessionCommand(),
		execCommand(),
		shellCommand(),
		serveCommand(),
		mcpCommand(),
		finishCommand(),
		appUnpackCommand(),
		{name: "version", summary: "print the version", use: "version", setup: func(*flagSet) runner {
			return func(_ context.Context, io *IO, args []string) int {
				fmt.Fprintf(io.Stdout, "pinfold %s\n", Version)
				return 0
			}
		}},
	}
}

// Main runs pinfold with args (without the program name) and returns the
// exit status.
func Main(ctx context.Context, io *IO, args []string) int {
	if code, ok := hidden(ctx, io, args); ok {
		return code
	}
	// Before anything starts a process that runs elsewhere (a session's
	// supervisor, in /).
	kubernetes.AbsEnv()
	code := 0
	io.args = args
	root := &cobra.Command{
		Use:           "pinfold",
		Short:         "pinfold runs commands in a sandbox",
		Long:          "pinfold runs commands in a sandbox and keeps what they write aside as a reviewable changeset.",
		Version:       Version,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			c.SetOut(io.Stderr)
			c.Help()
			code = fault.ExitUsage
			return nil
		},
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: false},
	}
	root.SetVersionTemplate("pinfold {{.Version}}\n")
	root.SetArgs(args)
	root.SetIn(io.Stdin)
	root.SetOut(io.Stdout)
	root.SetErr(io.Stderr)
	// run --json prints its result line for a bad flag too, once --json
	// is parsed.
	var runJSON bool
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		if f := c.Flags().Lookup("json"); c.Name() == "run" && f != nil && f.Value.String() == "true" {
			runJSON = true
		}
		return flagError(strings.TrimPrefix(c.CommandPath(), "pinfold "), c.Flags(), err)
	})
	// A plain command builds only itself; help, completion and unknown
	// names need the whole tree.
	all := commands()
	only := all
	if len(args) > 0 {
		for _, c := range all {
			if c.name == args[0] {
				only = []command{c}
				break
			}
		}
	}
	for _, c := range only {
		root.AddCommand(build(io, c, &code))
	}
	if err := root.ExecuteContext(ctx); err != nil {
		var word, path string
		if n, _ := fmt.Sscanf(err.Error(), "unknown command %q for %q", &word, &path); n == 2 {
			// Suggestions need the whole tree, and cobra's check of a
			// command's arguments gives none.
			for _, c := range all {
				if !slices.ContainsFunc(only, func(o command) bool { return o.name == c.name }) {
					root.AddCommand(build(io, c, &code))
				}
			}
			parent := root
			if p, _, ferr := root.Find(strings.Fields(path)[1:]); ferr == nil {
				parent = p
			}
			parent.SuggestionsMinimumDistance = 2
			if s := parent.SuggestionsFor(word); len(s) > 0 {
				err = fmt.Errorf("%w\n\nDid you mean this?\n\t%s\n", err, strings.Join(s, "\n\t"))
			}
		}
		if runJSON {
			return failRun(io, &runOptions{json: true}, usageError(err), nil, nil)
		}
		return fail(io, usageError(err))
	}
	return code
}

// build makes the cobra command of c.
func build(io *IO, c command, code *int) *cobra.Command {
	cc := &cobra.Command{
		Use:                   c.use,
		Aliases:               c.aliases,
		Short:                 c.summary,
		Long:                  c.long,
		Hidden:                c.hidden,
		DisableFlagsInUseLine: true,
	}
	if cc.Long == "" {
		cc.Long = c.summary
	}
	if cc.Use == "" {
		cc.Use = c.name
	}
	for _, s := range c.sub {
		cc.AddCommand(build(io, s, code))
	}
	if c.setup == nil {
		// A group: without a subcommand it shows its help and fails.
		cc.Args = cobra.NoArgs
		cc.RunE = func(cmd *cobra.Command, args []string) error {
			var names []string
			for _, s := range c.sub {
				names = append(names, s.name)
			}
			e := fault.New(fault.Usage, cmd.CommandPath()+" needs a command: "+strings.Join(names, ", "), "",
				"see "+cmd.CommandPath()+" --help", nil)
			e.Exit = fault.ExitUsage
			*code = fail(io, e)
			return nil
		}
		return cc
	}
	cc.Flags().SetInterspersed(c.interspersed)
	fs := &flagSet{name: strings.TrimPrefix(cc.CommandPath(), "pinfold "), fs: cc.Flags()}
	run := c.setup(fs)
	cc.RunE = func(cmd *cobra.Command, args []string) error {
		fs.name = strings.TrimPrefix(cmd.CommandPath(), "pinfold ")
		*code = run(cmd.Context(), io, args)
		return nil
	}
	if c.complete != nil {
		cc.ValidArgsFunction = func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return c.complete(), cobra.ShellCompDirectiveNoFileComp
		}
	}
	return cc
}

// usageError turns cobra's errors (an unknown command, with its
// suggestions) into coded usage errors.
func usageError(err error) error {
	var fe *fault.Error
	if errors.As(err, &fe) {
		return err
	}
	msg := err.Error()
	what, more, _ := strings.Cut(msg, "\n")
	fix := "see pinfold --help"
	if i := strings.Index(more, "Did you mean this?"); i >= 0 {
		var s []string
		for _, l := range strings.Split(more[i:], "\n")[1:] {
			if l = strings.TrimSpace(l); l != "" {
				s = append(s, l)
			}
		}
		if len(s) > 0 {
			fix = "did you mean " + strings.Join(s, " or ") + "? (pinfold --help lists the commands)"
		}
	}
	e := fault.New(fault.Usage, what, "", fix, err)
	e.Exit = fault.ExitUsage
	return e
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

// helpText is a command's long help written as a usage block: without
// its "Usage:" lines and "Flags:" trailer, which cobra writes itself.
func helpText(usage string) string {
	_, text, _ := strings.Cut(usage, "\n\n")
	return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(text), "Flags:"))
}
