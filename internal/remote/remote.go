// Package remote is pinfold's command line where pinfold cannot sandbox
// (macOS, Windows): a client of a pinfold server on a Linux host. The
// commands the server runs (session start, ls, status, logs, stop, pause,
// resume, snapshot; exec; shell) go to PINFOLD_HOST through the
// pinfold-api helper's client, as they do from Linux; every other command
// of pinfold's is refused with PF142, saying it needs a Linux host.
//
// It builds on every system, so that Linux's tests hold it to the Linux
// command line's table (internal/cli), but only cmd/pinfold's build for
// other systems uses it: Linux's pinfold never links it.
package remote

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/helper"
)

// Version is set at build time with -ldflags "-X ...remote.Version=...".
var Version = "dev"

// SessionCommands are the session subcommands a server runs.
var SessionCommands = []string{"start", "ls", "list", "status", "logs", "stop", "pause", "resume", "snapshot"}

// SessionLocal are the session subcommands that work on the store of the
// host they run on, never through PINFOLD_HOST.
var SessionLocal = []string{"rm", "snapshots", "port"}

// LinuxOnly are pinfold's commands that need a local Linux host: every
// command of internal/cli's table but session, exec, shell and version,
// and cobra's completion (TestRemoteKnowsEveryCommand there keeps them
// one list).
var LinuxOnly = []string{"run", "plan", "changes", "diff", "apply", "discard", "export", "init", "doctor", "shim",
	"base", "images", "gc", "explain", "capability", "pack", "app", "clean", "serve", "mcp", "__finish", "__app-unpack",
	"completion"}

// NeedsLinux is the refusal of a command that needs a local Linux host
// (cmd is how it was called: "run", "session rm").
func NeedsLinux(cmd string) *fault.Error {
	why := "pinfold sandboxes commands with Linux's namespaces, cgroups and seccomp; on " + system() +
		" it is a client of a pinfold server on a Linux host, for session start|ls|status|logs|stop|pause|resume|snapshot, exec and shell"
	fix := "run commands on a server: PINFOLD_HOST=http://HOST:PORT PINFOLD_TOKEN=TOKEN pinfold session start, then pinfold exec SESSION -- COMMAND; or run pinfold " + cmd + " on a Linux host (docs/cli.md#pinfold-on-macos-and-windows)"
	if strings.HasPrefix(cmd, "session ") {
		why = "it works on the store of the host it runs on, not through PINFOLD_HOST"
		fix = "run pinfold " + cmd + " on the server's host (docs/cli.md#pinfold-on-macos-and-windows)"
	}
	return fault.New(fault.Unsupported, "pinfold "+cmd+" needs a Linux host: set PINFOLD_HOST to a pinfold server to run commands there", why, fix, nil)
}

// needsHost is the refusal of a command a server would run when
// PINFOLD_HOST is not set.
func needsHost(cmd string) *fault.Error {
	return fault.New(fault.Unsupported, "pinfold "+cmd+" needs a Linux host: set PINFOLD_HOST to a pinfold server to run commands there",
		"on "+system()+" pinfold has no sandbox of its own: sessions run on a pinfold server (pinfold serve on a Linux host)",
		"export PINFOLD_HOST=http://HOST:PORT and PINFOLD_TOKEN=TOKEN (a line of the server's --tokens file), or unix:///PATH for a socket forwarded from the host (docs/api.md)", nil)
}

func system() string {
	switch runtime.GOOS {
	case "darwin":
		return "macOS"
	case "windows":
		return "Windows"
	}
	return runtime.GOOS
}

// Main runs pinfold's command line with args (without the program name)
// and returns the exit status: the remote command's own for exec.
func Main(ctx context.Context, stdin, stdout, stderr *os.File, args []string) int {
	fail := func(err *fault.Error) int {
		fmt.Fprintf(stderr, "pinfold: %s\n", err.Error())
		return fault.ExitCode(err)
	}
	if len(args) == 0 {
		usage(stderr)
		return fault.ExitUsage
	}
	name := args[0]
	switch {
	case name == "-h" || name == "--help" || name == "help":
		usage(stdout)
		return 0
	case name == "version" || name == "--version" || name == "-v":
		fmt.Fprintf(stdout, "pinfold %s\n", Version)
		return 0
	case slices.Contains(LinuxOnly, name):
		return fail(NeedsLinux(name))
	case name == "session":
		if len(args) < 2 {
			usage(stderr)
			return fault.ExitUsage
		}
		if args[1] == "-h" || args[1] == "--help" || args[1] == "help" {
			usage(stdout)
			return 0
		}
		if !slices.Contains(SessionCommands, args[1]) {
			if slices.Contains(SessionLocal, args[1]) {
				return fail(NeedsLinux("session " + args[1]))
			}
			return fail(fault.New(fault.Usage, fmt.Sprintf("unknown command %q for \"pinfold session\"", args[1]), "",
				"pinfold session "+strings.Join(SessionCommands, "|"), nil))
		}
		name = "session " + args[1]
	case name == "exec" || name == "shell":
	default:
		return fail(fault.New(fault.Usage, fmt.Sprintf("unknown command %q for \"pinfold\"", name), "", "see pinfold --help", nil))
	}
	if helpAsked(args) {
		usage(stdout)
		return 0
	}
	if os.Getenv("PINFOLD_HOST") == "" {
		return fail(needsHost(name))
	}
	return client(ctx, stdin, stdout, stderr, args)
}

// helpAsked says whether args ask for help: anywhere in a session
// subcommand's, only among exec's and shell's flags before the session
// (what follows is the remote command's: exec S -- grep --help).
func helpAsked(args []string) bool {
	isHelp := func(a string) bool { return a == "-h" || a == "--help" }
	if args[0] == "session" {
		return slices.ContainsFunc(args, isHelp)
	}
	for i := 1; i < len(args); i++ {
		switch a := args[i]; {
		case isHelp(a):
			return true
		case a == "-e" || a == "--env" || a == "-w" || a == "--workdir":
			i++
		case a == "--" || !strings.HasPrefix(a, "-"):
			return false
		}
	}
	return false
}

func usage(w *os.File) {
	fmt.Fprintf(w, `pinfold runs commands in a sandbox on a Linux host. On %s it is a client of
a pinfold server (pinfold serve on the Linux host), named by PINFOLD_HOST
(http://HOST:PORT with PINFOLD_TOKEN, or unix:///PATH):

  pinfold session start [flags]           start a session on the server
  pinfold session ls|status|logs|stop|pause|resume|snapshot SESSION
  pinfold exec [-it] [-e NAME=VALUE] [-w DIR] SESSION [--] COMMAND [ARGS...]
  pinfold shell SESSION                    an interactive shell in a session
  pinfold version

The other commands (run, plan, diff, apply, ...) need a Linux host.
See docs/cli.md#pinfold-on-macos-and-windows.
`, system())
}

// client runs pinfold-api client ARGS, the client Linux's pinfold execs
// for PINFOLD_HOST too, and passes its exit status on. It cannot replace
// this process (Windows has no exec): it waits, ignoring the signals a
// terminal sends the helper as well, and forwards the others.
func client(ctx context.Context, stdin, stdout, stderr *os.File, args []string) int {
	p, err := apiHelper()
	if err != nil {
		fmt.Fprintf(stderr, "pinfold: %s\n", err.Error())
		return fault.ExitCode(err)
	}
	cmd := exec.CommandContext(ctx, p, append([]string{"client"}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	// Caught from before the start: none may end pinfold and leave the
	// helper without its parent.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, caught...)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		e := fault.New(fault.API, "cannot run "+p, err.Error(), "", err)
		fmt.Fprintf(stderr, "pinfold: %s\n", e.Error())
		return fault.ExitCode(e)
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case s := <-sigs:
				if forwarded(s) {
					cmd.Process.Signal(s)
				}
			case <-done:
				return
			}
		}
	}()
	return exitStatus(cmd.Wait())
}

// exitStatus is the helper's exit status, 128+N when signal N killed it.
func exitStatus(err error) int {
	var ee *exec.ExitError
	if err == nil {
		return 0
	}
	if !errors.As(err, &ee) {
		return fault.ExitFailed
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fault.ExitSignalBase + int(ws.Signal())
	}
	return ee.ExitCode()
}

// apiHelper finds pinfold-api (helper.Find), as Linux's pinfold does.
func apiHelper() (string, *fault.Error) {
	if p, err := helper.Find("pinfold-api", "PINFOLD_API_HELPER"); err == nil {
		return p, nil
	}
	return "", fault.New(fault.API, "pinfold-api is missing", "PINFOLD_HOST needs the API helper, which holds the client",
		"build it for this system beside pinfold (GOOS="+runtime.GOOS+" GOARCH="+runtime.GOARCH+" scripts/build.sh pinfold pinfold-api), or set PINFOLD_API_HELPER", nil)
}
