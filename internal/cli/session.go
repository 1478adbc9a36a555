package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/pinfold/pinfold/internal/agent"
	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/internal/session"
	"github.com/pinfold/pinfold/internal/store"
	"github.com/pinfold/pinfold/internal/terminal"
	"github.com/pinfold/pinfold/internal/units"
)

// hidden runs the session agent and supervisor, which are pinfold
// re-executed, before cobra: they are not commands for people.
func hidden(ctx context.Context, io *IO, args []string) (int, bool) {
	if len(args) == 0 {
		return 0, false
	}
	switch args[0] {
	case "session", "exec", "shell":
		// Against a server (PINFOLD_HOST), through the API's client.
		if os.Getenv("PINFOLD_HOST") != "" && !slices.Contains(args, "--help") && !slices.Contains(args, "-h") {
			return execAPI(io, append([]string{"client"}, args...)...), true
		}
	case agent.AgentCommand:
		return agent.AgentMain(args[1:]), true
	case agent.BridgeCommand:
		return agent.BridgeMain(args[1:]), true
	case session.SuperviseCommand:
		if len(args) != 2 {
			return fault.ExitUsage, true
		}
		eng := engineFor(io)
		return session.Supervise(ctx, eng, args[1]), true
	}
	return 0, false
}

// sessionStore opens the sessions of the user's store, which must be the
// user's own (store.Check): the commands then trust its records and dial
// its agents' sockets.
func sessionStore() (*session.Store, string, error) {
	dir, err := store.DefaultDir()
	if err != nil {
		return nil, "", fault.New(fault.Store, "cannot find pinfold's store", err.Error(), "set PINFOLD_STORE", err)
	}
	if err := store.Check(dir); err != nil {
		return nil, "", fault.New(fault.Store, "cannot use pinfold's store", err.Error(),
			"chmod 700 the store, or set PINFOLD_STORE to a directory of your own", err)
	}
	return session.Open(dir), dir, nil
}

func sessionCommand() command {
	return command{name: "session", summary: "keep a sandbox up for many commands", use: "session COMMAND",
		long: `A session is a sandbox that stays up: pinfold exec runs commands in it, which
share its /tmp, its home (/home/sandbox), its processes and its changeset.
pinfold diff shows the changeset at any time; apply or discard it once the
session is stopped.`,
		sub: []command{sessionStartCommand(), sessionLsCommand(), sessionStatusCommand(), sessionLogsCommand(),
			sessionStopCommand(), sessionRmCommand(), sessionPauseCommand(true), sessionPauseCommand(false),
			sessionSnapshotCommand(), sessionSnapshotsCommand(), sessionPortCommand()}}
}

func sessionStartCommand() command {
	return command{name: "start", summary: "start a session", use: "start [flags]",
		long: `Starts a session with the same flags as run (base, access, network, limits...)
and prints its id. The session's writes to the workspace are kept as a
changeset, as a run's are.`,
		setup: func(fs *flagSet) runner {
			var o runOptions
			var name, idle, snap string
			runFlags(fs, "session", &o)
			fs.String(&snap, "snapshot", 0, "ID", "start from a snapshot (pinfold session snapshot): its files are restored into the new session")
			fs.String(&name, "name", 0, "NAME", "name the session (pinfold exec NAME -- CMD)")
			fs.String(&idle, "idle-timeout", 0, "DURATION", "stop the session after this long without a command or connection (default never)")
			return func(ctx context.Context, io *IO, args []string) int {
				if len(args) > 0 {
					return fail(io, fs.errorf("pinfold session start takes no command: run commands with pinfold exec"))
				}
				req := &session.StartRequest{Flags: o.flags, Config: o.config, Frozen: o.frozen || os.Getenv("CI") == "true", Name: name}
				if idle != "" {
					d, err := parseDuration(idle)
					if err != nil {
						return fail(io, fault.New(fault.BadValue, "invalid --idle-timeout "+idle, err.Error(), "use a duration like 30m or 90s", nil))
					}
					req.Idle = d
				}
				req.Cwd, _ = os.Getwd()
				st, _, err := sessionStore()
				if err != nil {
					return fail(io, err)
				}
				r, err := session.Start(ctx, engineFor(io), st, req, session.StartOptions{Snapshot: snap})
				if err != nil {
					return fail(io, err)
				}
				if o.json {
					b, _ := json.MarshalIndent(r, "", "  ")
					io.Stdout.Write(append(b, '\n'))
					return 0
				}
				fmt.Fprintln(io.Stdout, r.ID)
				if r.Changeset != "" {
					fmt.Fprintf(io.Stderr, "pinfold: session %s started; its changeset is %s (pinfold diff %s)\n", r.ID, r.Changeset, r.Changeset)
				}
				return 0
			}
		}}
}

// sessionRefs completes session arguments: the ids and names of live
// sessions.
func sessionRefs() []string {
	st, _, err := sessionStore()
	if err != nil {
		return nil
	}
	list, _ := st.List("")
	var refs []string
	for _, r := range list {
		if r.Live() {
			refs = append(refs, r.ID)
			if r.Name != "" {
				refs = append(refs, r.Name)
			}
		}
	}
	return refs
}

func parseDuration(s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return d, nil
	}
	var n float64
	if _, err := fmt.Sscanf(s, "%g", &n); err == nil && fmt.Sprint(n) == s {
		return time.Duration(n * float64(time.Second)), nil
	}
	return 0, errors.New("not a duration")
}

// findSession resolves a session reference; "" is the newest running
// session of the current workspace.
func findSession(st *session.Store, ref string) (*session.Record, error) {
	if ref == "" {
		all, err := st.List("")
		if err != nil {
			return nil, fault.New(fault.Store, "cannot read the sessions", err.Error(), "", err)
		}
		ws := currentWorkspace()
		for _, r := range all {
			if r.State == session.StateRunning && r.Workspace == ws {
				return r, nil
			}
		}
		return nil, fault.New(fault.SessionNotFound, "no running session for "+ws, "", "start one with pinfold session start, or name one (pinfold session ls)", nil)
	}
	r, err := st.Get(ref, "")
	if err != nil {
		return nil, fault.New(fault.SessionNotFound, "no session "+ref, err.Error(), "pinfold session ls --all lists them", err)
	}
	return r, nil
}

// sessionsToRemove is what rm REF removes: a name kept by several
// sessions (a name is free again once its session ended) means every
// ended one of them, so that the running one of that name does not hide
// them; an id, or a name only a running session has, means that one.
func sessionsToRemove(st *session.Store, ref string) ([]*session.Record, error) {
	if all, err := st.List(""); err == nil {
		var ended []*session.Record
		for _, r := range all {
			if r.Name == ref && r.ID != ref && !r.Live() {
				ended = append(ended, r)
			}
		}
		if len(ended) > 0 {
			return ended, nil
		}
	}
	r, err := findSession(st, ref)
	if err != nil {
		return nil, err
	}
	return []*session.Record{r}, nil
}

func running(r *session.Record) error {
	if r.State == session.StateRunning {
		return nil
	}
	why := r.Reason
	if why == "" {
		why = r.Error
	}
	fix := "start a new one with pinfold session start"
	if r.State == session.StatePaused {
		fix = "pinfold session resume " + r.ID
	}
	return fault.New(fault.SessionEnded, "session "+r.ID+" is "+r.State, why, fix, nil)
}

func sessionLsCommand() command {
	return command{name: "ls", interspersed: true, aliases: []string{"list"}, summary: "list sessions", use: "ls [--all] [--json] [--tenant NAME]",
		setup: func(fs *flagSet) runner {
			var all, asJSON bool
			var tenant string
			fs.Bool(&all, "all", 'a', "also list ended sessions")
			fs.String(&tenant, "tenant", 0, "NAME", "list a tenant's sessions of pinfold serve (its API's and E2B's sandboxes) instead of your own")
			fs.Bool(&asJSON, "json", 0, "print JSON")
			return func(ctx context.Context, io *IO, args []string) int {
				if len(args) > 0 {
					return fail(io, fs.errorf("pinfold session ls takes no arguments, not %q", strings.Join(args, " ")))
				}
				st, _, err := sessionStore()
				if err != nil {
					return fail(io, err)
				}
				list, err := st.List(tenant)
				if err != nil {
					return fail(io, fault.New(fault.Store, "cannot read the sessions", err.Error(), "", err))
				}
				shown := []*session.Record{}
				for _, r := range list {
					if all || r.Live() {
						shown = append(shown, r)
					}
				}
				if asJSON {
					b, _ := json.MarshalIndent(shown, "", "  ")
					io.Stdout.Write(append(b, '\n'))
					return 0
				}
				tw := tabwriter.NewWriter(io.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tNAME\tSTATE\tCREATED\tCHANGESET\tWORKSPACE")
				for _, r := range shown {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Name, state(r), r.Created.Local().Format("2006-01-02 15:04:05"),
						r.Changeset, r.Workspace)
				}
				tw.Flush()
				return 0
			}
		}}
}

func state(r *session.Record) string {
	if !r.Live() && r.Reason != "" {
		return r.State + " (" + r.Reason + ")"
	}
	return r.State
}

func sessionStatusCommand() command {
	return command{name: "status", interspersed: true, complete: sessionRefs, summary: "show a session", use: "status [SESSION] [--json]",
		setup: func(fs *flagSet) runner {
			var asJSON bool
			fs.Bool(&asJSON, "json", 0, "print JSON")
			return func(ctx context.Context, io *IO, args []string) int {
				st, _, err := sessionStore()
				if err != nil {
					return fail(io, err)
				}
				r, err := oneSession(fs, st, args)
				if err != nil {
					return fail(io, err)
				}
				if asJSON {
					b, _ := json.MarshalIndent(r, "", "  ")
					io.Stdout.Write(append(b, '\n'))
					return 0
				}
				fmt.Fprintf(io.Stdout, "session:   %s\n", r.ID)
				if r.Name != "" {
					fmt.Fprintf(io.Stdout, "name:      %s\n", r.Name)
				}
				fmt.Fprintf(io.Stdout, "state:     %s\n", state(r))
				fmt.Fprintf(io.Stdout, "workspace: %s\nbackend:   %s\ncreated:   %s\n", r.Workspace, r.Backend, r.Created.Local().Format(time.RFC3339))
				if r.Idle != "" {
					fmt.Fprintf(io.Stdout, "idle:      stops after %s without a command\n", r.Idle)
				}
				if r.Changeset != "" {
					fmt.Fprintf(io.Stdout, "changeset: %s\n", r.Changeset)
				}
				if r.Error != "" {
					fmt.Fprintf(io.Stdout, "error:     %s\n", r.Error)
				}
				return 0
			}
		}}
}

func first(args []string) string {
	if len(args) > 0 {
		return args[0]
	}
	return ""
}

// oneSession finds the session the only argument names (none: this
// workspace's running one); more than one argument is refused, never
// ignored.
func oneSession(fs *flagSet, st *session.Store, args []string) (*session.Record, error) {
	if len(args) > 1 {
		return nil, fs.errorf("pinfold %s takes one session, not %q", fs.name, strings.Join(args, " "))
	}
	return findSession(st, first(args))
}

func sessionLogsCommand() command {
	return command{name: "logs", interspersed: true, complete: sessionRefs, summary: "show a session's log", use: "logs [-f] [SESSION]",
		long: `Shows what the session's agent and sandbox wrote outside any pinfold exec, and
the session's notices. With -f, follows it until the session ends.`,
		setup: func(fs *flagSet) runner {
			var follow bool
			fs.Bool(&follow, "follow", 'f', "follow the log until the session ends")
			return func(ctx context.Context, io *IO, args []string) int {
				st, _, err := sessionStore()
				if err != nil {
					return fail(io, err)
				}
				r, err := oneSession(fs, st, args)
				if err != nil {
					return fail(io, err)
				}
				f, err := os.Open(st.LogPath(r.ID))
				if err != nil {
					return fail(io, fault.New(fault.Store, "cannot read the log of session "+r.ID, err.Error(), "", err))
				}
				defer f.Close()
				io.Stdout.ReadFrom(f)
				for follow {
					r, err = st.Get(r.ID, "")
					if err != nil || !r.Live() {
						io.Stdout.ReadFrom(f)
						return 0
					}
					select {
					case <-ctx.Done():
						return 0
					case <-time.After(200 * time.Millisecond):
					}
					io.Stdout.ReadFrom(f)
				}
				return 0
			}
		}}
}

func sessionStopCommand() command {
	return command{name: "stop", interspersed: true, complete: sessionRefs, summary: "stop a session", use: "stop [SESSION]",
		long: `Stops a session: everything running in it ends, and its changeset is recorded
as a run's is (pinfold diff, apply, discard).`,
		setup: func(fs *flagSet) runner {
			var wait string
			fs.String(&wait, "time", 0, "SECONDS", "how long to wait for the session to end before killing it (default 10)")
			return func(ctx context.Context, io *IO, args []string) int {
				st, _, err := sessionStore()
				if err != nil {
					return fail(io, err)
				}
				r, err := oneSession(fs, st, args)
				if err != nil {
					return fail(io, err)
				}
				grace := 10 * time.Second
				if wait != "" {
					if grace, err = parseDuration(wait); err != nil {
						return fail(io, fault.New(fault.BadValue, "invalid --time "+wait, "", "give seconds", nil))
					}
				}
				r, err = session.Stop(ctx, st, r, grace)
				if err != nil {
					return fail(io, err)
				}
				printSessionEnd(io, r)
				return 0
			}
		}}
}

func printSessionEnd(io *IO, r *session.Record) {
	msg := "pinfold: session " + r.ID + " " + state(r)
	if r.Changeset != "" {
		msg += fmt.Sprintf("; changeset %s: %d added, %d modified, %d deleted; review: pinfold diff %s; apply: pinfold apply %s; discard: pinfold discard %s",
			r.Changeset, r.Added, r.Modified, r.Deleted, r.Changeset, r.Changeset, r.Changeset)
	}
	fmt.Fprintln(io.Stderr, msg)
}

func sessionPauseCommand(pause bool) command {
	name, summary := "pause", "freeze every process of a session"
	if !pause {
		name, summary = "resume", "thaw a paused session"
	}
	return command{name: name, interspersed: true, complete: sessionRefs, summary: summary, use: name + " [SESSION]",
		long: summary + ` (the cgroup freezer; root). A paused session runs no command and
its idle time does not count.`,
		setup: func(fs *flagSet) runner {
			return func(ctx context.Context, io *IO, args []string) int {
				st, _, err := sessionStore()
				if err != nil {
					return fail(io, err)
				}
				r, err := oneSession(fs, st, args)
				if err != nil {
					return fail(io, err)
				}
				if pause {
					_, err = session.Pause(st, r)
				} else {
					_, err = session.Resume(st, r)
				}
				if err != nil {
					return fail(io, engine.Classify(err, nil))
				}
				return 0
			}
		}}
}

func sessionSnapshotCommand() command {
	return command{name: "snapshot", interspersed: true, complete: sessionRefs, summary: "save a session's changeset as an OCI layer", use: "snapshot [SESSION] [--json]",
		long: `Saves what the session has written so far (its changeset) as an OCI layer in the
store and prints the snapshot's id: pinfold session start --snapshot ID
restores it into a new session of the same workspace.`,
		setup: func(fs *flagSet) runner {
			var asJSON bool
			fs.Bool(&asJSON, "json", 0, "print JSON")
			return func(ctx context.Context, io *IO, args []string) int {
				st, _, err := sessionStore()
				if err != nil {
					return fail(io, err)
				}
				r, err := oneSession(fs, st, args)
				if err != nil {
					return fail(io, err)
				}
				s, err := session.TakeSnapshot(ctx, st, r)
				if err != nil {
					return fail(io, err)
				}
				if asJSON {
					b, _ := json.MarshalIndent(s, "", "  ")
					io.Stdout.Write(append(b, '\n'))
					return 0
				}
				fmt.Fprintln(io.Stdout, s.ID)
				fmt.Fprintf(io.Stderr, "pinfold: snapshot %s of session %s: %s, %d bytes (%s)\n", s.ID, r.ID, s.Digest, s.Size, st.LayerPath(s.ID))
				return 0
			}
		}}
}

func sessionSnapshotsCommand() command {
	return command{name: "snapshots", summary: "list or remove snapshots", use: "snapshots [--json] [--rm ID...]", interspersed: true,
		long: `Lists the snapshots in the store, newest first: their id, when and of which
session they were taken, their workspace and size. With --rm, removes the
snapshots named instead.`,
		setup: func(fs *flagSet) runner {
			var asJSON, rm bool
			fs.Bool(&asJSON, "json", 0, "print JSON")
			fs.Bool(&rm, "rm", 0, "remove the snapshots named")
			return func(ctx context.Context, io *IO, args []string) int {
				st, _, err := sessionStore()
				if err != nil {
					return fail(io, err)
				}
				if rm {
					if len(args) == 0 {
						return fail(io, fs.errorf("pinfold session snapshots --rm needs a snapshot id"))
					}
					for _, id := range args {
						if err := session.RemoveSnapshot(st, id, ""); err != nil {
							return fail(io, err)
						}
					}
					return 0
				}
				if len(args) > 0 {
					return fail(io, fs.errorf("pinfold session snapshots takes no arguments (--rm ID removes one)"))
				}
				list, err := session.Snapshots(st, "")
				if err != nil {
					return fail(io, fault.New(fault.Store, "cannot read the snapshots", err.Error(), "", err))
				}
				if list == nil {
					list = []*session.Snapshot{} // [] in JSON
				}
				if listed(io, asJSON, list, len(list), "no snapshots") {
					return 0
				}
				tw := tabwriter.NewWriter(io.Stdout, 2, 8, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tCREATED\tSESSION\tSIZE\tWORKSPACE")
				for _, s := range list {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.ID, s.Created.Local().Format("2006-01-02 15:04:05"), s.Session,
						units.FormatSize(s.Size), s.Workspace)
				}
				tw.Flush()
				return 0
			}
		}}
}

func sessionPortCommand() command {
	return command{name: "port", summary: "forward a host port to a running session", use: "port [SESSION] PORT [[ADDR:]HOSTPORT]",
		long: `Forwards connections to HOSTPORT of the host (default address 127.0.0.1; a
free port when none is given) to PORT on the session's own loopback, whatever
its network, until interrupted. Ports given to session start with -p are
published for the session's whole life instead.`,
		setup: func(fs *flagSet) runner {
			return func(ctx context.Context, io *IO, args []string) int {
				ref := ""
				if len(args) == 3 || len(args) == 2 && !isPort(args[0]) {
					ref, args = args[0], args[1:]
				}
				if len(args) == 0 || len(args) > 2 || !isPort(args[0]) {
					return fail(io, fs.errorf("pinfold session port needs a sandbox port: port [SESSION] PORT [[ADDR:]HOSTPORT]"))
				}
				port, _ := strconv.Atoi(args[0])
				host := "127.0.0.1:0"
				if len(args) == 2 {
					host = args[1]
					if !strings.Contains(host, ":") {
						host = "127.0.0.1:" + host
					}
				}
				st, _, err := sessionStore()
				if err != nil {
					return fail(io, err)
				}
				r, err := findSession(st, ref)
				if err != nil {
					return fail(io, err)
				}
				if err := running(r); err != nil {
					return fail(io, err)
				}
				l, err := agent.Forward(st.Sock(r.ID), host, port)
				if err != nil {
					return fail(io, fault.New(fault.BadValue, "cannot listen on "+host, err.Error(), "choose another host port", err))
				}
				defer l.Close()
				// Caught before the address shows: whoever reads it may
				// end the forwarding at once.
				sigs := make(chan os.Signal, 1)
				signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
				defer signal.Stop(sigs)
				fmt.Fprintf(io.Stdout, "%s\n", l.Addr())
				fmt.Fprintf(io.Stderr, "pinfold: forwarding %s to port %d of session %s (Ctrl-C ends it)\n", l.Addr(), port, r.ID)
				tick := time.NewTicker(time.Second)
				defer tick.Stop()
				for {
					select {
					case <-sigs:
						return 0
					case <-ctx.Done():
						return 0
					case <-tick.C:
						if cur, err := st.Get(r.ID, ""); err != nil || !cur.Live() {
							fmt.Fprintf(io.Stderr, "pinfold: session %s ended\n", r.ID)
							return 0
						}
					}
				}
			}
		}}
}

func isPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n > 0 && n < 65536
}

func sessionRmCommand() command {
	return command{name: "rm", summary: "forget ended sessions", use: "rm SESSION...",
		setup: func(fs *flagSet) runner {
			return func(ctx context.Context, io *IO, args []string) int {
				st, _, err := sessionStore()
				if err != nil {
					return fail(io, err)
				}
				if len(args) == 0 {
					return fail(io, fs.errorf("pinfold session rm needs a session"))
				}
				for _, a := range args {
					rs, err := sessionsToRemove(st, a)
					for _, r := range rs {
						if err = st.Remove(r); err != nil {
							err = fault.New(fault.SessionRefused, "cannot remove session "+r.ID, err.Error(), "pinfold session stop "+r.ID, err)
							break
						}
					}
					if err != nil {
						return fail(io, err)
					}
				}
				return 0
			}
		}}
}

func execCommand() command {
	return command{name: "exec", summary: "run a command in a session", use: "exec [flags] SESSION [--] COMMAND [ARGS...]",
		long: `Runs COMMAND in a running session. It shares the session's /tmp, home,
processes and changeset; its exit status is pinfold's.`,
		setup: func(fs *flagSet) runner {
			var o execOptions
			execFlags(fs, &o)
			return func(ctx context.Context, io *IO, args []string) int {
				if len(args) < 2 {
					return fail(io, fs.errorf("pinfold exec needs a session and a command"))
				}
				cmd := args[1:]
				if cmd[0] == "--" {
					cmd = cmd[1:]
				}
				if len(cmd) == 0 {
					return fail(io, fs.errorf("pinfold exec needs a command after the session"))
				}
				return execMain(ctx, io, &o, args[0], cmd)
			}
		}}
}

type execOptions struct {
	tty, interactive bool
	env              []string
	workdir          string
}

func execFlags(fs *flagSet, o *execOptions) {
	fs.Bool(&o.tty, "tty", 't', "run the command on a pseudo-terminal")
	fs.Bool(&o.interactive, "interactive", 'i', "keep stdin attached")
	fs.List(&o.env, "env", 'e', "NAME=VALUE", "set a variable (repeatable)")
	fs.String(&o.workdir, "workdir", 'w', "PATH", "working directory inside (default: the session's)")
}

func shellCommand() command {
	return command{name: "shell", complete: sessionRefs, summary: "open a shell in a session", use: "shell [SESSION]",
		long: `Opens an interactive shell (bash when the sandbox has it, else sh) in a
session: the named one, or the newest running one of this workspace.`,
		setup: func(fs *flagSet) runner {
			var o execOptions
			fs.List(&o.env, "env", 'e', "NAME=VALUE", "set a variable (repeatable)")
			fs.String(&o.workdir, "workdir", 'w', "PATH", "working directory inside (default: the session's)")
			return func(ctx context.Context, io *IO, args []string) int {
				if len(args) > 1 {
					return fail(io, fs.errorf("pinfold shell takes one session"))
				}
				o.interactive = true
				o.tty = terminal.Is(io.Stdin) && terminal.Is(io.Stdout)
				ref := first(args)
				return execMain(ctx, io, &o, ref, []string{"/bin/sh", "-c", `if command -v bash >/dev/null; then exec bash -l; fi; exec sh -l`})
			}
		}}
}

func execMain(ctx context.Context, io *IO, o *execOptions, ref string, cmd []string) int {
	for _, e := range o.env {
		if err := plan.CheckEnvFlag(e); err != nil {
			return fail(io, err)
		}
	}
	st, _, err := sessionStore()
	if err != nil {
		return fail(io, err)
	}
	r, err := findSession(st, ref)
	if err != nil {
		return fail(io, err)
	}
	if err := running(r); err != nil {
		return fail(io, err)
	}
	var env []string
	for _, e := range o.env {
		if !strings.Contains(e, "=") {
			v, ok := os.LookupEnv(e)
			if !ok {
				continue
			}
			e += "=" + v
		}
		env = append(env, e)
	}
	req := &agent.Request{Args: cmd, Env: env, Dir: o.workdir, TTY: o.tty}
	if o.tty {
		req.Rows, req.Cols, _ = terminal.Size(io.Stdout)
		req.Env = append([]string{"TERM=" + terminal.Term()}, req.Env...)
	}
	req.Stdin = o.interactive
	x, err := agent.StartExec(ctx, st.Sock(r.ID), req)
	if err != nil {
		return fail(io, fault.New(fault.SessionEnded, "cannot reach session "+r.ID, err.Error(), "pinfold session status "+r.ID, err))
	}
	defer x.Close()
	if o.tty && o.interactive {
		if restore := terminal.Raw(io.Stdin); restore != nil {
			defer restore()
		}
	}
	if o.interactive {
		go func() {
			io.Stdin.WriteTo(x.Stdin())
			x.Stdin().Close()
		}()
	}
	fw := terminal.Catch(o.tty, io.Stdout)
	defer fw.Stop()
	go fw.Relay(nil, func(s syscall.Signal) { x.Signal(s) }, func(rows, cols uint16) { x.Resize(rows, cols) })
	e, err := x.Wait(io.Stdout, io.Stderr, nil)
	if err != nil {
		return fail(io, fault.New(fault.SessionEnded, "session "+r.ID+": "+err.Error(), "", "pinfold session status "+r.ID, err))
	}
	if e.Truncated {
		fmt.Fprintln(io.Stderr, "pinfold: output cut off: a process the command left running held it open (redirect its output)")
	}
	return execExit(io, e, cmd[0], o.workdir)
}

// execExit maps how an exec ended to pinfold's exit status.
func execExit(io *IO, e *agent.Exit, name, dir string) int {
	switch {
	case e.BadDir:
		return fail(io, engine.WorkdirFault(dir, "session", e.Error, nil))
	case e.NotFound:
		fe := fault.New(fault.NotFound, "command not found in the session: "+name, e.Error, "give the full path, or install it in the session", nil)
		fe.Exit = fault.ExitNotFound
		return fail(io, fe)
	case e.NotExecutable:
		fe := fault.New(fault.CannotExec, "cannot execute "+name+" in the session", e.Error, "check that it is an executable file for this machine", nil)
		fe.Exit = fault.ExitCannotExec
		return fail(io, fe)
	case e.Error != "":
		return fail(io, fault.New(fault.SessionRefused, "session exec failed", e.Error, "", nil))
	}
	return e.Code
}
