package apihelper

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"

	"github.com/pinfold/pinfold/client"
	"github.com/pinfold/pinfold/internal/terminal"
)

// clientMain runs pinfold's session commands against the server named by
// PINFOLD_HOST (unix:///PATH or http://HOST:PORT, with PINFOLD_TOKEN):
// pinfold hands them here so that its own binary never links the client.
func clientMain(args []string) int {
	host := os.Getenv("PINFOLD_HOST")
	var opts []client.Option
	if tok := os.Getenv("PINFOLD_TOKEN"); tok != "" {
		opts = append(opts, client.WithToken(tok))
	}
	c, err := client.New(host, opts...)
	if err != nil {
		return failf("%s PINFOLD_HOST: %v", client.CodeBadValue, err)
	}
	ctx := context.Background()
	if len(args) == 0 {
		return usage()
	}
	switch args[0] {
	case "exec", "shell":
		return execRemote(ctx, c, args)
	case "session":
		if len(args) < 2 {
			return usage()
		}
		return sessionRemote(ctx, c, args[1], args[2:])
	}
	return usage()
}

func usage() int {
	fmt.Fprintln(os.Stderr, "pinfold: "+client.CodeUsage+" with PINFOLD_HOST, the commands are: session start|ls|status|logs|stop|pause|resume|snapshot, exec, shell")
	fmt.Fprintln(os.Stderr, "  Fix: unset PINFOLD_HOST for the others (session rm, snapshots, port), which work on the local store")
	return 125
}

func failf(format string, a ...any) int {
	fmt.Fprintf(os.Stderr, "pinfold: "+format+"\n", a...)
	return 125
}

func apiFail(err error) int {
	if ce, ok := err.(*client.Error); ok {
		fmt.Fprintf(os.Stderr, "pinfold: %s %s\n", ce.Code, ce.Message)
		if ce.Fix != "" {
			fmt.Fprintf(os.Stderr, "  Fix: %s\n", ce.Fix)
		}
		return 125
	}
	return failf("%s %v", client.CodeAPI, err)
}

func printJSON(v any) {
	b, _ := json.MarshalIndent(v, "", "  ")
	os.Stdout.Write(append(b, '\n'))
}

// sessionRemote runs a session subcommand through the API.
func sessionRemote(ctx context.Context, c *client.Client, sub string, args []string) int {
	a := parseSessionArgs(args)
	ref := ""
	if len(a.pos) > 0 {
		ref = a.pos[0]
	}
	switch sub {
	case "start":
		return startRemote(ctx, c, a)
	case "ls", "list":
		return listRemote(ctx, c, a)
	case "status":
		sb, err := c.Get(ctx, ref)
		if err != nil {
			return apiFail(err)
		}
		printJSON(sb)
		return 0
	case "logs":
		if err := c.Logs(ctx, ref, os.Stdout); err != nil {
			return apiFail(err)
		}
		return 0
	case "stop":
		sb, err := c.Delete(ctx, ref)
		if err != nil {
			return apiFail(err)
		}
		fmt.Fprintf(os.Stderr, "pinfold: session %s %s", sb.ID, sb.State)
		if sb.Changeset != "" {
			fmt.Fprintf(os.Stderr, "; changeset %s: %d added, %d modified, %d deleted", sb.Changeset, sb.Added, sb.Modified, sb.Deleted)
		}
		fmt.Fprintln(os.Stderr)
		return 0
	case "pause", "resume":
		f := c.Pause
		if sub == "resume" {
			f = c.Resume
		}
		if _, err := f(ctx, ref); err != nil {
			return apiFail(err)
		}
		return 0
	case "snapshot":
		sn, err := c.Snapshot(ctx, ref)
		if err != nil {
			return apiFail(err)
		}
		if a.bools["--json"] {
			printJSON(sn)
		} else {
			fmt.Println(sn.ID)
		}
		return 0
	}
	return usage()
}

// sessionArgs are a session command's arguments: the values of its
// flags (repeated ones in order), the flags without values, and the
// operands.
type sessionArgs struct {
	flags map[string][]string
	bools map[string]bool
	pos   []string
}

// sessionValued are the session flags that take a value.
var sessionValued = map[string]bool{"--name": true, "--idle-timeout": true, "--base": true, "--access": true, "--network": true,
	"--memory": true, "-m": true, "--pids": true, "--cpus": true, "--timeout": true, "--tmp-size": true, "--env": true,
	"-e": true, "--workdir": true, "-w": true, "--workspace": true, "--allow": true, "--deny": true, "--backend": true,
	"--hostname": true, "--user": true, "-u": true, "--time": true, "--snapshot": true}

func parseSessionArgs(args []string) sessionArgs {
	a := sessionArgs{flags: map[string][]string{}, bools: map[string]bool{}}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		name, val, hasVal := strings.Cut(arg, "=")
		switch {
		case sessionValued[name] && hasVal:
			a.flags[name] = append(a.flags[name], val)
		case sessionValued[arg] && i+1 < len(args):
			a.flags[arg] = append(a.flags[arg], args[i+1])
			i++
		case strings.HasPrefix(arg, "-") && arg != "-":
			a.bools[arg] = true
		default:
			a.pos = append(a.pos, arg)
		}
	}
	return a
}

// one is the last value of the first of names given, "" for none.
func (a *sessionArgs) one(names ...string) string {
	for _, n := range names {
		if v := a.flags[n]; len(v) > 0 {
			return v[len(v)-1]
		}
	}
	return ""
}

// startRemote is session start through the API.
func startRemote(ctx context.Context, c *client.Client, a sessionArgs) int {
	one := a.one
	wd, _ := os.Getwd()
	ws := one("--workspace")
	if ws == "" {
		ws = wd
	}
	r := client.CreateRequest{Name: one("--name"), IdleTimeout: one("--idle-timeout"), Base: one("--base"),
		Access: one("--access"), Network: one("--network"), Memory: one("--memory", "-m"), Pids: one("--pids"),
		CPUs: one("--cpus"), Timeout: one("--timeout"), TmpSize: one("--tmp-size"), Workdir: one("--workdir", "-w"),
		Env: append(a.flags["--env"], a.flags["-e"]...), Allow: a.flags["--allow"], Deny: a.flags["--deny"],
		Backend: one("--backend"), Hostname: one("--hostname"), User: one("--user", "-u"), Snapshot: one("--snapshot")}
	// A tenant over TCP gets a workspace of its own. A server's socket
	// reached from macOS or Windows is forwarded from a Linux host,
	// where this directory is not: only --workspace names one there.
	if strings.HasPrefix(os.Getenv("PINFOLD_HOST"), "unix://") || strings.HasPrefix(os.Getenv("PINFOLD_HOST"), "/") {
		if runtime.GOOS == "linux" || one("--workspace") != "" {
			r.Workspace = ws
		}
	}
	sb, err := c.Create(ctx, r)
	if err != nil {
		return apiFail(err)
	}
	if a.bools["--json"] {
		printJSON(sb)
	} else {
		fmt.Println(sb.ID)
	}
	return 0
}

// listRemote is session ls through the API.
func listRemote(ctx context.Context, c *client.Client, a sessionArgs) int {
	l, err := c.List(ctx, a.bools["--all"] || a.bools["-a"])
	if err != nil {
		return apiFail(err)
	}
	if a.bools["--json"] {
		printJSON(l)
		return 0
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATE\tCREATED\tCHANGESET\tWORKSPACE")
	for _, s := range l {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.Name, s.State, s.Created.Local().Format("2006-01-02 15:04:05"), s.Changeset, s.Workspace)
	}
	tw.Flush()
	return 0
}

// execRemote runs exec and shell through the API's WebSocket.
func execRemote(ctx context.Context, c *client.Client, args []string) int {
	var tty, interactive bool
	var env []string
	var dir, ref string
	var cmd []string
	shell := args[0] == "shell"
	rest := args[1:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		switch {
		case ref != "":
			cmd = rest[i:]
			if cmd[0] == "--" {
				cmd = cmd[1:]
			}
			i = len(rest)
		case a == "-e" || a == "--env" || a == "-w" || a == "--workdir":
			if i+1 >= len(rest) {
				return failf("%s %s needs a value", client.CodeUsage, a)
			}
			if a == "-e" || a == "--env" {
				env = append(env, rest[i+1])
			} else {
				dir = rest[i+1]
			}
			i++
		case a == "--tty":
			tty = true
		case a == "--interactive":
			interactive = true
		case strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && len(a) > 1 && strings.Trim(a[1:], "it") == "":
			tty = tty || strings.Contains(a, "t")
			interactive = interactive || strings.Contains(a, "i")
		default:
			ref = a
		}
	}
	if shell {
		interactive = true
		tty = terminal.Is(os.Stdin) && terminal.Is(os.Stdout)
		cmd = []string{"/bin/sh", "-c", "if command -v bash >/dev/null; then exec bash -l; fi; exec sh -l"}
	}
	if ref == "" || len(cmd) == 0 {
		return failf("%s pinfold exec needs a session and a command", client.CodeUsage)
	}
	r := client.StreamRequest{Args: cmd, Env: env, Dir: dir, TTY: tty}
	if tty {
		r.Rows, r.Cols, _ = terminal.Size(os.Stdout)
		r.Env = append([]string{"TERM=" + terminal.Term()}, r.Env...)
	}
	var stdin io.Reader
	if interactive {
		stdin = os.Stdin
	}
	if tty {
		defer enableVT()()
	}
	if tty && interactive {
		if restore := terminal.Raw(os.Stdin); restore != nil {
			defer restore()
		}
	}
	attach, stop := relay(tty)
	p, err := c.Start(ctx, ref, r, stdin, os.Stdout, os.Stderr)
	if err != nil {
		stop()
		return apiFail(err)
	}
	attach(p)
	e, err := p.Wait()
	stop()
	if err != nil {
		return failf("%s %v", client.CodeEnded, err)
	}
	if e.Truncated {
		fmt.Fprintln(os.Stderr, "pinfold: output cut off: a process the command left running held it open (redirect its output)")
	}
	switch {
	case e.NotFound:
		fmt.Fprintf(os.Stderr, "pinfold: %s command not found in the session: %s\n", client.CodeNotFound, cmd[0])
		return 127
	case e.NotExecutable:
		fmt.Fprintf(os.Stderr, "pinfold: %s cannot execute %s in the session\n", client.CodeCannotExec, cmd[0])
		return 126
	case e.BadDir:
		return failf("%s the working directory %s does not exist in the session: %s", client.CodeBadValue, dir, e.Error)
	case e.Error != "":
		return failf("%s %s", client.CodeRefused, e.Error)
	}
	return e.Code
}
