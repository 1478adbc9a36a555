package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	initp "github.com/pinfold/pinfold/internal/backend/native"
	"github.com/pinfold/pinfold/internal/changeset"
	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/pack"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/internal/session"
	"github.com/pinfold/pinfold/internal/store"
	"github.com/pinfold/pinfold/internal/terminal"
	"github.com/pinfold/pinfold/internal/units"
	"github.com/pinfold/pinfold/sandbox"
)

func runCommand() command {
	return command{name: "run", summary: "run a command in a sandbox", use: "run [flags] [--] COMMAND [ARGS...]",
		long: `Runs COMMAND in a sandbox: the current directory (the workspace) is
mounted at its own path, the host's system directories are read-only, and
nothing else of the host is visible. What COMMAND writes to the workspace
is kept aside as a changeset (pinfold diff, apply, discard). COMMAND's exit
status is pinfold's.`,
		setup: func(fs *flagSet) runner {
			var o runOptions
			runFlags(fs, "run", &o)
			return func(ctx context.Context, io *IO, args []string) int { return runMain(ctx, io, &o, args) }
		}}
}

// runOptions are the flags of run and plan beyond the plan's own.
type runOptions struct {
	flags  plan.Flags
	json   bool
	config string
	frozen bool
	quiet  bool
	// app is the app file run, plan or explain was given, if any, and
	// appSet the settings it gave in place of flags (key: plan source).
	app           *pack.Archive
	appSet        []string
	unpackStarted bool // unpackAppLater started its unpack
}

// runFlags declares the flags of run, plan and explain.
func runFlags(fs *flagSet, name string, o *runOptions) {
	f := &o.flags
	fs.String(&o.config, "config", 'c', "FILE", "pinfold.yaml to use (default: found walking up from the current directory)")
	fs.Bool(&o.frozen, "frozen", 0, "fail instead of adding capabilities the config does not list (the default with CI=true)")
	if name == "run" {
		fs.Bool(&o.quiet, "quiet", 'q', "print only errors: no progress, notices or changeset summary")
	}
	fs.String(&f.Backend, "backend", 0, "NAME", "native (default), gvisor, podman, docker, kubernetes, host or auto")
	fs.String(&f.Base, "base", 0, "BASE", "root filesystem: host (default), debian-12, dir:PATH, tar:PATH, oci:PATH[:REF] or oci:HOST/REPO[:TAG|@DIGEST]")
	fs.Bool(&f.RequirePinnedImage, "require-pinned-image", 0, "refuse an oci: registry image named by tag instead of @sha256:digest")
	fs.List(&f.VerifyKeys, "verify-key", 0, "FILE", "check the oci: registry image's cosign signature against this PEM public key before using it (repeatable)")
	fs.String(&f.Access, "access", 0, "MODE", "workspace access: changeset (default: writes kept for review), rw, ro or none")
	fs.List(&f.Capture, "capture", 0, "PATH", "also keep the writes to this host directory in the changeset (repeatable)")
	fs.String(&f.Changeset, "changeset", 0, "ID", "run on top of this open changeset")
	if name == "run" {
		fs.Bool(&f.Apply, "apply", 0, "apply the changeset when the command succeeds")
	}
	fs.String(&f.Workspace, "workspace", 0, "PATH", "workspace directory (default: the config's directory, else the current one)")
	fs.String(&f.Workdir, "workdir", 'w', "PATH", "working directory inside (default: cwd if in the workspace)")
	fs.List(&f.Mounts, "mount", 'v', "SRC:DST[:ro]", "bind a host path into the sandbox (repeatable)")
	fs.List(&f.Env, "env", 'e', "NAME[=VALUE]", "set a variable, or pass the host's value (repeatable)")
	fs.String(&f.User, "user", 'u', "root", "run as root inside the user namespace (default: your ids)")
	fs.String(&f.Hostname, "hostname", 0, "NAME", "hostname inside (default: sandbox)")
	fs.String(&f.Network, "network", 0, "MODE", "network: none (default: loopback only), outbound, allow (only --allow entries) or host")
	fs.List(&f.Allow, "allow", 0, "ENTRY", "with --network allow: a name, *.wildcard, address or CIDR the sandbox may reach; tcp:NAME for protocols other than TLS and HTTP (repeatable)")
	fs.List(&f.Deny, "deny", 0, "ENTRY", "a name, *.wildcard, address or CIDR never reached; wins over --allow (repeatable)")
	fs.Bool(&f.HostLoopback, "host-loopback", 0, "make the host's 127.0.0.1 reachable at 10.0.2.2 inside")
	fs.List(&f.Publish, "publish", 'p', "[ADDR:]HOSTPORT:PORT", "publish a sandbox TCP port on the host (default address 127.0.0.1; repeatable)")
	fs.List(&f.DNS, "dns", 0, "ADDR[:PORT]", "upstream resolver for pinfold's DNS server (default: the host's; repeatable)")
	fs.List(&f.CapAdd, "cap-add", 0, "CAP", "grant a capability inside the sandbox (repeatable)")
	fs.String(&f.Memory, "memory", 'm', "SIZE", "memory limit, like 512m or 2g")
	fs.String(&f.Pids, "pids", 0, "N", "limit on processes and threads")
	fs.String(&f.CPUs, "cpus", 0, "N", "CPU limit, like 0.5 or 2")
	fs.String(&f.Timeout, "timeout", 0, "DURATION", "kill the sandbox after this long (exit status 124)")
	fs.String(&f.TmpSize, "tmp-size", 0, "SIZE", "size of /tmp (default 1g)")
	fs.String(&f.Disk, "disk", 0, "SIZE", "cap what the run may write into its changeset and /tmp, like 2g (default none; root)")
	fs.Bool(&f.TTY, "tty", 't', "run the command on a pseudo-terminal")
	fs.Bool(&f.Interactive, "interactive", 'i', "keep stdin attached")
	switch {
	case name == "run":
		fs.Bool(&o.json, "json", 0, "print the result as JSON on stdout when the command ends")
	case name == "session":
		fs.Bool(&o.json, "json", 0, "print the session as JSON")
	case strings.HasPrefix(name, "pack "):
		fs.Bool(&o.json, "json", 0, "print the digest, layers, size, sandbox id and epoch as JSON")
	default:
		fs.Bool(&o.json, "json", 0, "print the plan as JSON")
	}
}

// engineFor returns the engine the CLI runs plans with: pinfold's store,
// and a reporter that prints to stderr.
func engineFor(io *IO) *engine.Engine {
	dir, _ := store.DefaultDir()
	e := engine.New(dir)
	e.Version = Version
	e.Report = newReporter(io.Stderr, dir)
	return e
}

// resolve makes the plan of a command line.
func resolve(ctx context.Context, e *engine.Engine, o *runOptions, args []string) (*plan.Plan, error) {
	p, err := e.Resolve(ctx, &engine.Request{Args: args, Flags: o.flags, Config: o.config,
		Frozen: o.frozen || os.Getenv("CI") == "true"})
	if err == nil && o.app != nil {
		for _, key := range o.appSet { // the app's, not the user's flags
			p.Sources[key] = "the app " + o.app.Path
		}
	}
	return p, err
}

func runMain(ctx context.Context, io *IO, o *runOptions, rest []string) int {
	tr := newTracer()
	tr.mark("pinfold: main")
	lr := newLaunchRecorder(io.args, rest, o.config)
	eng := engineFor(io)
	eng.Report.(*reporter).quiet = o.quiet
	if err := eng.Recover(ctx); err != nil {
		return failRun(io, o, err, nil, nil)
	}
	rest, err := appRun(o, rest)
	if err != nil {
		return failRun(io, o, err, nil, nil)
	}
	p, err := resolve(ctx, eng, o, rest)
	if err != nil {
		return failRun(io, o, engine.Classify(err, nil), nil, nil)
	}
	if err := appMounts(o.app, p); err != nil {
		return failRun(io, o, err, p, nil)
	}
	tr.mark("pinfold: planned")
	if p.Backend != "native" {
		// An init the launcher may have started for this first run
		// (initp.SpawnFirst) would wait unclaimed.
		initp.DiscardLauncherInit()
	}
	if strings.HasPrefix(p.BackendReason, "auto:") && !o.quiet {
		fmt.Fprintf(io.Stderr, "pinfold: backend %s (%s)\n", p.Backend, p.BackendReason)
	}
	if err := engine.CheckHostLimits(p); err != nil {
		return failRun(io, o, err, p, nil)
	}
	if p.Mode == "host" {
		why := p.Sources["backend"]
		if p.BackendReason != "" {
			why = p.BackendReason
		}
		fmt.Fprintf(io.Stderr, "pinfold: running on the host, not in a sandbox (backend host, %s; %s)\n", why, p.Audit.Rule)
	}
	opts := engine.Options{Stdin: io.Stdin, Stdout: io.Stdout, Stderr: io.Stderr}
	if tr != nil {
		opts.Mark = tr.mark
	}
	if p.TTY {
		opts.Rows, opts.Cols, _ = terminal.Size(io.Stdout)
		if p.Interactive {
			if restore := terminal.Raw(io.Stdin); restore != nil {
				defer restore()
			}
		}
	}
	// A quiet run's changeset summary is not printed; the finish after a
	// handoff always prints it.
	handoff := tr == nil && !o.json && engine.CanHandoff(p) && !(o.quiet && p.Sandbox.Access == sandbox.AccessChangeset)
	if handoff {
		// A plain run hands off to the runtime's small waiter once the
		// command runs, recording its launch first.
		r := &sandbox.Result{Limits: p.Sandbox.Limits, Timeout: p.Timeout}
		oom := &sandbox.Result{Limits: p.Sandbox.Limits, Reason: sandbox.ReasonOOM}
		opts.Handoff = &engine.Handoff{
			TimeoutMsg: "pinfold: " + limitMessage(r, sandbox.LimitTimeout),
			TmpFullMsg: "pinfold: " + limitMessage(r, sandbox.LimitTmp),
			MemoryMsg:  "pinfold: " + limitMessage(r, sandbox.LimitMemory),
			OOMMsg:     "pinfold: " + limitMessage(oom, sandbox.LimitMemory),
			PidsMsg:    "pinfold: " + limitMessage(r, sandbox.LimitPids),
			Report:     io.Stderr, Record: lr.record(p),
			Ready: func(sandbox.Process, string) bool { unpackAppLater(o, p); return true },
		}
	}
	// Signals become the command's once it runs. Enabling them costs the
	// runtime a thread and a handshake per signal: that happens while this
	// goroutine waits for the sandbox to be built, and the command starts
	// only once it is done (a USR1 sent once its first output showed
	// would otherwise be lost to Go's default of ignoring it). One
	// arriving earlier kills pinfold, and with it the sandbox (the
	// parent-death signal).
	caught := make(chan *terminal.Forwarder, 1)
	if !handoff {
		var fw *terminal.Forwarder
		catching := make(chan struct{})
		go func() { fw = terminal.Catch(p.TTY, io.Stdout); close(catching) }()
		opts.BeforeCommand = func() { <-catching }
		go func() { <-catching; caught <- fw }()
	}
	run, err := eng.Start(ctx, p, opts)
	if err != nil {
		return failRun(io, o, engine.Classify(err, p), p, nil)
	}
	unpackAppLater(o, p)
	if handoff {
		// Still here: the hand-off did not happen (a network helper of
		// the run's own, which dies with this process, cannot be handed
		// off; nor can a changeset whose lock cannot be kept), so this
		// process waits for the command and must forward its signals.
		caught <- terminal.Catch(p.TTY, io.Stdout)
	}
	// The signals stay caught after the command: they end it, not
	// pinfold's report of it.
	waited := make(chan struct{})
	go func() {
		(<-caught).Relay(waited, func(s syscall.Signal) {
			if run.SharesTerminal && (s == syscall.SIGINT || s == syscall.SIGQUIT) {
				return // the terminal sent it to the command already
			}
			run.Signal(s)
		}, func(rows, cols uint16) { run.Resize(rows, cols) })
	}()
	out, err := run.Wait()
	close(waited)
	if err != nil {
		if out != nil && out.Changeset != nil {
			printChangeset(io, out, p)
		}
		return failRun(io, o, engine.Classify(err, p), p, out)
	}
	res := out.Result
	report(io, res, p.Disk, o.json)
	if o.json {
		printResultJSON(io, resultJSON(res, p.Disk, out.Changeset))
	}
	// Printed with --json too (docs/cli.md): the JSON has it as well.
	if out.Changeset != nil && !o.quiet {
		printChangeset(io, out, p)
	}
	if len(out.Missing) > 0 {
		suggestCapabilities(io, out.Missing)
	}
	if !o.json {
		summarizeViolations(io, res.Violations, out.ViolationLog)
	}
	if tr != nil {
		tr.mark("pinfold: exiting")
		tr.print(io.Stderr, res)
	}
	return res.ExitCode
}

// printChangeset tells the user what became of the run's changeset.
func printChangeset(io *IO, out *engine.Outcome, p *plan.Plan) {
	c := out.Changeset
	if c.Empty {
		return
	}
	counts := fmt.Sprintf("%d added, %d modified, %d deleted", c.Counts.Added, c.Counts.Modified, c.Counts.Deleted)
	if c.DiskFull {
		// Said first, and in the summary: what is kept is incomplete.
		counts += fmt.Sprintf("; the run hit its disk cap (--disk %s): writes past it failed with \"no space left on device\"",
			units.FormatSize(p.Disk))
		if p.Apply && out.Result.ExitCode == 0 {
			fmt.Fprintf(io.Stderr, "pinfold: not applying: some writes failed at the disk cap\n")
		}
	}
	if p.Apply && out.Result.ExitCode != 0 {
		fmt.Fprintf(io.Stderr, "pinfold: not applying: the command failed (exit status %d)\n", out.Result.ExitCode)
	}
	if c.Applied {
		fmt.Fprintf(io.Stderr, "pinfold: applied %s\n", counts)
		printStripped(io, c.Stripped)
		return
	}
	id := c.ID
	fmt.Fprintf(io.Stderr, "pinfold: changeset %s: %s; review: pinfold diff %s; apply: pinfold apply %s; discard: pinfold discard %s\n",
		id, counts, id, id, id)
}

// failRun is fail for run: with --json, the result line is printed too,
// with the error (and whatever is known of the run: its changeset).
func failRun(io *IO, o *runOptions, err error, p *plan.Plan, out *engine.Outcome) int {
	code := fail(io, err)
	if o == nil || !o.json {
		return code
	}
	var res *sandbox.Result
	var cs *engine.ChangesetOutcome
	if out != nil {
		res, cs = out.Result, out.Changeset
	}
	if res == nil {
		res = &sandbox.Result{}
		if p != nil {
			res.Limits, res.Timeout = p.Sandbox.Limits, p.Timeout
		}
	}
	var disk int64
	if p != nil {
		disk = p.Disk
	}
	j := resultJSON(res, disk, cs)
	j.Status, j.Reason, j.Error = code, reasonError, errorJSON(err)
	printResultJSON(io, j)
	return code
}

// reasonError is the --json reason of a run pinfold could not start or
// finish: error says why.
const reasonError = "error"

// jsonError is a pinfold error in --json output, as the API gives it
// (docs/api.md), with its why.
type jsonError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Why     string `json:"why,omitempty"`
	Fix     string `json:"fix,omitempty"`
}

func errorJSON(err error) *jsonError {
	var fe *fault.Error
	if !errors.As(err, &fe) {
		return &jsonError{Code: string(fault.Internal), Message: err.Error()}
	}
	return &jsonError{Code: string(fe.Code), Message: fe.What, Why: fe.Why, Fix: fe.Fix}
}

// jsonChangeset is what became of the run's changeset, in --json output.
type jsonChangeset struct {
	ID string `json:"id"`
	// Status is "open" (to review, apply or discard) or "applied" (--apply).
	Status   string `json:"status"`
	Added    int    `json:"added"`
	Modified int    `json:"modified"`
	Deleted  int    `json:"deleted"`
	// Stripped are the files --apply wrote without their set-id bits.
	Stripped []string `json:"setid_stripped,omitempty"`
}

// jsonResult is the --json output.
type jsonResult struct {
	Status int        `json:"status"`
	Signal string     `json:"signal,omitempty"`
	Reason string     `json:"reason"`
	Error  *jsonError `json:"error,omitempty"`
	// Changeset is the run's changeset; absent when the run kept none
	// (it wrote nothing, or its access was not changeset).
	Changeset  *jsonChangeset `json:"changeset,omitempty"`
	DurationMS float64        `json:"duration_ms"`
	LimitsHit  []string       `json:"limits_hit"`
	// Violations are what the network policy blocked.
	Violations []sandbox.Violation `json:"violations"`
	Limits     struct {
		Memory  int64   `json:"memory,omitempty"`
		Pids    int64   `json:"pids,omitempty"`
		CPUs    float64 `json:"cpus,omitempty"`
		TmpSize int64   `json:"tmp_size"`
		Disk    int64   `json:"disk,omitempty"`
		Timeout float64 `json:"timeout_s,omitempty"`
	} `json:"limits"`
}

// resultJSON is the --json result of a run.
func resultJSON(r *sandbox.Result, diskCap int64, cs *engine.ChangesetOutcome) *jsonResult {
	var j jsonResult
	j.Status, j.Reason = r.ExitCode, string(r.Reason)
	if r.Signal != 0 {
		j.Signal = unix.SignalName(r.Signal)
	}
	j.DurationMS = float64(r.Duration.Microseconds()) / 1000
	j.LimitsHit = r.LimitsHit
	if j.LimitsHit == nil {
		j.LimitsHit = []string{}
	}
	j.Violations = r.Violations
	if j.Violations == nil {
		j.Violations = []sandbox.Violation{}
	}
	j.Limits.Memory, j.Limits.Pids, j.Limits.CPUs = r.Limits.Memory, r.Limits.Pids, r.Limits.CPUs
	j.Limits.TmpSize, j.Limits.Timeout, j.Limits.Disk = r.Limits.TmpSize, r.Timeout.Seconds(), diskCap
	if cs != nil && !cs.Empty {
		j.Changeset = &jsonChangeset{ID: cs.ID, Status: changeset.StatusOpen, Added: cs.Counts.Added,
			Modified: cs.Counts.Modified, Deleted: cs.Counts.Deleted, Stripped: cs.Stripped}
		if cs.Applied {
			j.Changeset.Status = changeset.StatusApplied
		}
	}
	return &j
}

// printResultJSON prints the --json result as one line on stdout.
func printResultJSON(io *IO, j *jsonResult) {
	b, _ := json.Marshal(j)
	io.Stdout.Write(append(b, '\n'))
}

// report tells the user about the limits the command hit (the JSON result
// holds them with --json).
func report(io *IO, r *sandbox.Result, diskCap int64, asJSON bool) {
	if asJSON {
		return
	}
	for _, l := range r.LimitsHit {
		if l == engine.LimitDisk {
			continue // the changeset summary says it
		}
		fmt.Fprintf(io.Stderr, "pinfold: %s\n", limitMessage(r, l))
	}
}

func limitMessage(r *sandbox.Result, limit string) string {
	switch limit {
	case sandbox.LimitTimeout:
		return "killed: timeout (limit " + r.Timeout.String() + ")"
	case sandbox.LimitMemory:
		verb := "limit hit"
		if r.Reason == sandbox.ReasonOOM {
			verb = "killed"
		}
		return verb + ": out of memory (limit " + units.FormatSize(r.Limits.Memory) + ")"
	case sandbox.LimitPids:
		return fmt.Sprintf("limit hit: process limit, fork refused (limit %d)", r.Limits.Pids)
	case sandbox.LimitTmp:
		return "limit hit: /tmp is full (limit " + units.FormatSize(r.Limits.TmpSize) + ")"
	}
	return "limit hit: " + limit
}

// printStripped says which files were applied without the set-id bits
// the sandbox gave them.
func printStripped(io *IO, paths []string) {
	if len(paths) == 0 {
		return
	}
	shown := paths
	if len(shown) > 10 {
		shown = shown[:10]
	}
	more := ""
	if len(paths) > len(shown) {
		more = fmt.Sprintf(" and %d more", len(paths)-len(shown))
	}
	fmt.Fprintf(io.Stderr, "pinfold: applied without their set-user-id/set-group-id bits (a sandbox never plants set-id programs; see docs/security.md): %s%s\n",
		strings.Join(shown, ", "), more)
}

// finishCommand is what the waiter of a run that handed off with a
// changeset becomes once the command ended and its changeset holds
// something (see engine.Options.Handoff): "pinfold __finish STORE ID
// STATUS" records and reports the changeset as the run would have, and
// exits with the command's status.
func finishCommand() command {
	return command{name: "__finish", use: "__finish STORE ID STATUS", hidden: true,
		summary: "record the changeset of a run that handed off (pinfold's own use)",
		setup: func(fs *flagSet) runner {
			return func(ctx context.Context, io *IO, args []string) int {
				status := -1
				if len(args) == 3 {
					status, _ = strconv.Atoi(args[2])
				}
				if status < 0 || status > 255 || !filepath.IsAbs(args[0]) {
					return fail(io, usageError(errors.New("usage: pinfold __finish STORE ID STATUS")))
				}
				// The command has ended: a Ctrl-C now must not cut the
				// record of what it wrote short.
				signal.Ignore(syscall.SIGINT, syscall.SIGQUIT)
				e := engine.New(args[0])
				e.Version = Version
				e.Report = newReporter(io.Stderr, args[0])
				co, err := e.FinishHandedOff(ctx, args[1], status)
				// Recorded: free the changeset before the session's record
				// says the run ended (an apply may follow at once).
				changeset.ReleaseInheritedLock(args[0], args[1])
				// A session's supervisor hands off too: its record ends here.
				if co != nil {
					session.Open(args[0]).Finished(args[1], status, co.Empty, co.Counts.Added, co.Counts.Modified, co.Counts.Deleted)
				} else {
					session.Open(args[0]).Finished(args[1], status, false, 0, 0, 0)
				}
				if co != nil {
					printChangeset(io, &engine.Outcome{Result: &sandbox.Result{ExitCode: status}, Changeset: co}, &plan.Plan{Disk: co.DiskCap})
				}
				if err != nil {
					fail(io, engine.Classify(err, nil))
				}
				return status
			}
		}}
}
