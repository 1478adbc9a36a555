package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/pinfold/pinfold/internal/backend/host"
	"github.com/pinfold/pinfold/internal/backend/native"
	"github.com/pinfold/pinfold/internal/cgroup"
	"github.com/pinfold/pinfold/internal/config"
	"github.com/pinfold/pinfold/internal/disk"
	"github.com/pinfold/pinfold/internal/doctor"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/internal/store"
	"github.com/pinfold/pinfold/internal/units"
	"github.com/pinfold/pinfold/sandbox"
	"golang.org/x/sys/unix"
)

const runUsage = `Usage: pinfold run [flags] [--] COMMAND [ARGS...]

Runs COMMAND in a sandbox: the current directory (the workspace) is
mounted at its own path, the host's system directories are read-only, and
nothing else of the host is visible. COMMAND's exit status is pinfold's.

Flags:
`

// runOptions are the flags of run and plan beyond the plan's own.
type runOptions struct {
	flags  plan.Flags
	json   bool
	config string
	frozen bool
}

func runFlags(name string, o *runOptions) *flagSet {
	f := &o.flags
	fs := newFlagSet(name)
	fs.String(&o.config, "config", 'c', "FILE", "pinfold.yaml to use (default: found walking up from the current directory)")
	fs.Bool(&o.frozen, "frozen", 0, "fail instead of adding capabilities the config does not list (the default with CI=true)")
	fs.String(&f.Backend, "backend", 0, "NAME", "native (default), host or auto")
	fs.String(&f.Base, "base", 0, "BASE", "root filesystem: host (default), debian-12, dir:PATH, tar:PATH, oci:PATH[:REF] or oci:HOST/REPO[:TAG]")
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
	fs.List(&f.Allow, "allow", 0, "ENTRY", "with --network allow: a name, *.wildcard, address or CIDR the sandbox may reach (repeatable)")
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
	if name == "run" {
		fs.Bool(&o.json, "json", 0, "print the result as JSON on stdout when the command ends")
	} else {
		fs.Bool(&o.json, "json", 0, "print the plan as JSON")
	}
	return fs
}

// resolve loads the config in effect and resolves the plan for args.
func resolve(ctx context.Context, o *runOptions, args []string) (*plan.Plan, error) {
	cwd, err := os.Getwd()
	if err == nil {
		if real, e := filepath.EvalSymlinks(cwd); e == nil {
			cwd = real
		}
	}
	path := o.config
	if path == "" {
		if path, err = config.Find(cwd); err != nil {
			return nil, err
		}
	}
	var cfg *config.File
	if path != "" {
		if cfg, err = config.Load(path); err != nil {
			return nil, err
		}
	}
	home, _ := os.UserHomeDir()
	storeDir, _ := store.DefaultDir()
	p, err := plan.Resolve(&plan.Request{Args: args, Flags: o.flags, Config: cfg, Cwd: cwd, Home: home,
		Store: storeDir, Getenv: os.LookupEnv, Environ: os.Environ(), Exists: exists, Term: os.Getenv("TERM")})
	if err != nil {
		return nil, err
	}
	if p.Backend == "auto" {
		name, why, err := doctor.SelectBackend(ctx, needs(p))
		if err != nil {
			return nil, err
		}
		// auto never chooses the host: that is not a silent fallback to make.
		p.Backend, p.BackendReason = name, why
	}
	return p, nil
}

func needs(p *plan.Plan) doctor.Needs {
	l := p.Sandbox.Limits
	return doctor.Needs{Native: p.Mode == "sandbox", Limits: l.Memory > 0 || l.Pids > 0 || l.CPUs > 0,
		Limit: cgroup.Limits{MemoryBytes: l.Memory, Pids: l.Pids, CPUs: l.CPUs}}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func runMain(ctx context.Context, io *IO, args []string) int {
	tr := newTracer()
	tr.mark("pinfold: main")
	var o runOptions
	fs := runFlags("run", &o)
	rest, err := fs.Parse(args)
	if err != nil {
		return fail(io, err)
	}
	if fs.help {
		fmt.Fprint(io.Stdout, runUsage)
		fs.Usage(io.Stdout)
		return 0
	}
	lr := newLaunchRecorder(args, rest, o.config)
	if err := recoverApplies(ctx, io); err != nil {
		return fail(io, err)
	}
	p, err := resolve(ctx, &o, rest)
	if err != nil {
		return fail(io, classify(err, nil))
	}
	tr.mark("pinfold: planned")
	if err := runHooks(ctx, io, p); err != nil {
		return fail(io, err)
	}
	if p.Mode == "host" {
		return runOnHost(ctx, io, p)
	}
	if err := doctor.Preflight(ctx, needs(p)); err != nil {
		return fail(io, classify(err, p))
	}
	if err := makeCaches(p); err != nil {
		return fail(io, classify(err, p))
	}
	if err := ensureBase(ctx, io, p); err != nil {
		return fail(io, err)
	}
	if err := ensureImage(ctx, io, p, o.frozen || os.Getenv("CI") == "true"); err != nil {
		return fail(io, err)
	}
	cs, unlock, err := startChangeset(p)
	if err != nil {
		return fail(io, classify(err, p))
	}
	var vol *disk.Volume
	if cs != nil && p.Disk > 0 {
		if vol, err = openDisk(ctx, cs, p); err != nil {
			if p.Changeset == "" {
				cs.Remove()
			}
			unlock()
			return fail(io, err)
		}
	}
	p.Sandbox.Trace = tr != nil
	var vlog *violationLog
	if usesStack(p) {
		if vlog = newViolationLog(); vlog != nil {
			p.Sandbox.Net.Log = vlog
		}
	} else if p.Sandbox.Network == sandbox.NetworkHost {
		fmt.Fprintln(io.Stderr, "pinfold: the sandbox shares the host's network (--network host): no network policy applies")
	}
	started := func() {
		if vol != nil {
			// The sandbox holds its own mounts of the volume now.
			vol.Detach()
		}
	}
	// On bases pinfold builds, a loader error in the output gets a
	// suggestion: the capability that provides the missing library.
	var errTail *tailBuffer
	if p.Sandbox.Base.Kind != sandbox.BaseHost && !p.TTY {
		errTail = &tailBuffer{}
	}
	res, err := execute(ctx, io, p, tr, o.json || cs != nil, started, errTail, lr)
	vlog.close()
	if err != nil {
		if cs != nil {
			if vol != nil {
				dropDisk(cs, vol)
			}
			if p.Changeset == "" {
				cs.Remove()
			}
			unlock()
		}
		return fail(io, classify(err, p))
	}
	if vol != nil {
		full, err := closeDisk(ctx, cs, vol)
		if err != nil {
			unlock()
			return fail(io, err)
		}
		if full {
			res.LimitsHit = append(res.LimitsHit, limitDisk)
		}
	}
	if cs != nil {
		err := finishChangeset(ctx, io, cs, p, res, o.json)
		unlock()
		if err != nil {
			return fail(io, err)
		}
	}
	report(io, res, p.Disk, o.json)
	if res.ExitCode != 0 && errTail != nil {
		suggestCapabilities(io, errTail.b)
	}
	if !o.json {
		summarizeViolations(io, res.Violations, vlog.written())
	}
	if tr != nil {
		tr.mark("pinfold: exiting")
		tr.print(io.Stderr, res)
	}
	return res.ExitCode
}

// runHooks runs the plan's pre_run hooks on the host, in the workspace;
// the first failure aborts the run.
func runHooks(ctx context.Context, io *IO, p *plan.Plan) error {
	for _, h := range p.Hooks {
		cmd := exec.CommandContext(ctx, h.Args[0], h.Args[1:]...)
		cmd.Dir = p.Sandbox.Workspace
		cmd.Stdout, cmd.Stderr = io.Stderr, io.Stderr
		if err := cmd.Run(); err != nil {
			text := h.Shell
			if text == "" {
				text = strings.Join(h.Args, " ")
			}
			return fault.New(fault.HookFailed, "pre_run hook failed: "+text, err.Error()+" (hook from "+h.From+")",
				"fix what the hook checks, or remove it from pre_run", err)
		}
	}
	return nil
}

// runOnHost runs the command without a sandbox, saying so.
func runOnHost(ctx context.Context, io *IO, p *plan.Plan) int {
	why := p.Sources["backend"]
	if p.BackendReason != "" {
		why = p.BackendReason
	}
	fmt.Fprintf(io.Stderr, "pinfold: running on the host, not in a sandbox (backend host, %s; %s)\n", why, p.Audit.Rule)
	code, err := host.Run(ctx, &host.Cmd{Args: p.Command.Args, Env: p.Command.Environ(), Dir: p.Command.Dir,
		Stdin: io.Stdin, Stdout: io.Stdout, Stderr: io.Stderr})
	if err != nil {
		var ee *exec.Error
		if errors.As(err, &ee) {
			e := fault.New(fault.NotFound, "command not found on the host: "+p.Command.Args[0], ee.Err.Error(),
				"check the command and the PATH the plan gives it (pinfold plan -- CMD)", err)
			e.Exit = fault.ExitNotFound
			return fail(io, e)
		}
		e := fault.New(fault.CannotExec, "cannot run "+p.Command.Args[0]+" on the host", err.Error(), "", err)
		e.Exit = fault.ExitCannotExec
		return fail(io, e)
	}
	return code
}

// makeCaches creates the plan's cache directories in the store, owned by
// the workspace's owner so that the command can write them.
func makeCaches(p *plan.Plan) error {
	var owner *syscall.Stat_t
	for _, c := range p.Caches {
		if err := os.MkdirAll(c.Source, 0o700); err != nil {
			return &sandbox.SpecError{Field: "store", Err: err}
		}
		if os.Geteuid() == 0 {
			if owner == nil {
				owner = &syscall.Stat_t{}
				if err := syscall.Stat(p.Sandbox.Workspace, owner); err != nil {
					return &sandbox.SpecError{Field: "workspace", Err: err}
				}
			}
			if err := os.Lchown(c.Source, int(owner.Uid), int(owner.Gid)); err != nil {
				return &sandbox.SpecError{Field: "store", Err: err}
			}
		}
	}
	return nil
}

// execute runs a Plan on the native backend with the terminal attached.
func execute(ctx context.Context, io *IO, p *plan.Plan, tr *tracer, stay bool, started func(), errTail *tailBuffer, lr *launchRecorder) (*sandbox.Result, error) {
	// A plain run hands off to a small waiter once the command runs (see
	// sandbox.Process.Handoff); the sandbox must be started from the
	// thread that will exec it.
	handoff := !p.TTY && !stay && tr == nil && p.Sandbox.Limits.Memory == 0 &&
		p.Sandbox.Limits.Pids == 0 && p.Sandbox.Limits.CPUs == 0 && !usesStack(p) && errTail == nil
	record := false
	if handoff {
		runtime.LockOSThread()
		record = lr.plan(p)
	}
	sb, err := sandbox.New(ctx, p.Sandbox)
	if err != nil {
		return nil, err
	}
	defer sb.Close()
	tr.mark("pinfold: sandbox prepared")
	cmd := &sandbox.Cmd{Args: p.Command.Args, Env: p.Command.Environ(), Dir: p.Command.Dir, Timeout: p.Timeout}
	var restore func()
	if p.TTY {
		cmd.TTY = true
		if ws, err := unix.IoctlGetWinsize(int(io.Stdout.Fd()), unix.TIOCGWINSZ); err == nil {
			cmd.Rows, cmd.Cols = ws.Row, ws.Col
		}
		if p.Interactive {
			restore = rawMode(io.Stdin)
		}
	} else {
		cmd.Stdout, cmd.Stderr = io.Stdout, io.Stderr
		if errTail != nil {
			errTail.w = io.Stderr
			cmd.Stderr = errTail
		}
		if p.Interactive {
			cmd.Stdin = io.Stdin
		}
	}
	if restore != nil {
		defer restore()
	}
	if handoff {
		proc, err := sb.Run(ctx, cmd)
		if err != nil {
			return nil, err
		}
		r := &sandbox.Result{Limits: p.Sandbox.Limits, Timeout: p.Timeout}
		timeoutMsg, tmpFullMsg := "pinfold: "+limitMessage(r, sandbox.LimitTimeout), "pinfold: "+limitMessage(r, sandbox.LimitTmp)
		if record {
			lr.write(p, proc, timeoutMsg, tmpFullMsg)
		}
		err = proc.Handoff(timeoutMsg, tmpFullMsg)
		// Only a failed exec gets here: wait in-process instead.
		proc.Kill()
		proc.Wait()
		return nil, err
	}
	// Signals become the command's once it runs. Enabling them costs the
	// runtime a thread and a handshake per signal: that happens while this
	// goroutine waits for the init to build the root. One arriving earlier
	// kills pinfold, and with it the sandbox (the parent-death signal).
	sigs := make(chan os.Signal, 8)
	forwarded := []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}
	if p.TTY {
		forwarded = append(forwarded, syscall.SIGWINCH)
	}
	notified := make(chan struct{})
	go func() {
		signal.Notify(sigs, forwarded...)
		close(notified)
	}()
	proc, err := sb.Run(ctx, cmd)
	if err != nil {
		return nil, err
	}
	started()
	tr.mark("pinfold: command started")
	outDone := make(chan struct{})
	if proc.PTY != nil {
		go func() {
			copyTTY(io.Stdout, proc.PTY)
			close(outDone)
		}()
		if p.Interactive {
			go copyTTY(proc.PTY, io.Stdin)
		}
	} else {
		close(outDone)
	}
	waited := make(chan struct{})
	go func() {
		<-notified
		for {
			select {
			case s := <-sigs:
				if s == syscall.SIGWINCH {
					if ws, err := unix.IoctlGetWinsize(int(io.Stdout.Fd()), unix.TIOCGWINSZ); err == nil {
						proc.Resize(ws.Row, ws.Col)
					}
					continue
				}
				proc.Signal(s)
			case <-waited:
				return
			}
		}
	}()
	res, err := proc.Wait()
	tr.mark("pinfold: command ended")
	close(waited)
	// The terminal's output ends once every process holding it is gone,
	// which the init ensures before it reports.
	select {
	case <-outDone:
	case <-time.After(2 * time.Second):
	}
	return res, err
}

// copyTTY copies until the terminal closes (EIO once the sandbox is gone).
func copyTTY(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// rawMode puts a terminal into raw mode and returns how to restore it.
func rawMode(f *os.File) func() {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil // not a terminal: nothing to do
	}
	t := *old
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &t); err != nil {
		return nil
	}
	return func() { unix.IoctlSetTermios(fd, unix.TCSETS, old) }
}

// jsonResult is the --json output.
type jsonResult struct {
	Status     int      `json:"status"`
	Signal     string   `json:"signal,omitempty"`
	Reason     string   `json:"reason"`
	DurationMS float64  `json:"duration_ms"`
	LimitsHit  []string `json:"limits_hit"`
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

// report tells the user about limits the command hit, and prints the JSON
// result when asked.
func report(io *IO, r *sandbox.Result, diskCap int64, asJSON bool) {
	if asJSON {
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
		b, _ := json.Marshal(&j)
		io.Stdout.Write(append(b, '\n'))
		return
	}
	for _, l := range r.LimitsHit {
		if l == limitDisk {
			continue // the changeset summary says it
		}
		fmt.Fprintf(io.Stderr, "pinfold: %s\n", limitMessage(r, l))
	}
}

// limitDisk is the disk cap of a changeset run (--disk), which the CLI
// watches rather than the sandbox.
const limitDisk = "disk"

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

// classify turns a library error into a coded user error.
func classify(err error, p *plan.Plan) error {
	var fe *fault.Error
	if errors.As(err, &fe) {
		return err
	}
	var ce *config.Error
	if errors.As(err, &ce) {
		return fault.New(fault.ConfigError, ce.Error(), "", "fix the file (see docs/config.md), or pass --config", err)
	}
	var pe *doctor.PreflightError
	if errors.As(err, &pe) {
		return preflightFault(err)
	}
	if p == nil {
		return fault.New(fault.Internal, err.Error(), "", "please report this", err)
	}
	var ee *sandbox.ExecError
	if errors.As(err, &ee) {
		if errors.Is(ee.Err, fs.ErrNotExist) {
			e := fault.New(fault.NotFound, "command not found in the sandbox: "+ee.Name,
				"no executable "+ee.Name+" in the sandbox's PATH, or its interpreter is missing",
				"give the full path, install it in the base, or mount its directory with --mount", err)
			e.Exit = fault.ExitNotFound
			return e
		}
		e := fault.New(fault.CannotExec, "cannot execute "+ee.Name+" in the sandbox",
			ee.Err.Error(), "check that it is an executable file for this machine", err)
		e.Exit = fault.ExitCannotExec
		return e
	}
	var se *sandbox.SpecError
	if errors.As(err, &se) {
		switch se.Field {
		case "workspace":
			if errors.Is(err, sandbox.ErrWorkspace) {
				return fault.New(fault.WorkspaceRefuse, se.Err.Error(),
					"exposing it would hand the sandbox the host's system or other users' files",
					"run pinfold from your project directory, or pass --workspace DIR or --access none", err)
			}
			return fault.New(fault.WorkspaceMissing, "workspace "+p.Sandbox.Workspace+" cannot be used",
				se.Err.Error(), "pass an existing directory with --workspace", err)
		case "base":
			if p.Sandbox.Base.Kind == sandbox.BaseTar {
				return fault.New(fault.BaseImport, "cannot use tarball base "+p.Sandbox.Base.Path,
					se.Err.Error(), "check the file is a tar archive (optionally gzip, bzip2, xz or zstd)", err)
			}
			return fault.New(fault.BadBase, "cannot use base "+string(p.Sandbox.Base.Kind)+":"+p.Sandbox.Base.Path,
				se.Err.Error(), "use --base host, debian-12, dir:PATH to a directory, tar:PATH or oci:PATH", err)
		case "workdir":
			return fault.New(fault.BadValue, "the working directory "+p.Command.Dir+" does not exist in the sandbox",
				se.Err.Error(), "pass --workdir with a directory the sandbox has (the workspace, /tmp...)", err)
		case "mount":
			return fault.New(fault.BadMount, "cannot mount: "+se.Err.Error(), "",
				"use --mount SRC:DST[:ro] with an existing SRC and an absolute DST outside /proc and /dev", err)
		case "limits":
			return fault.New(fault.Limits, "cannot enforce the requested limits", se.Err.Error(),
				"run pinfold as root, or inside a cgroup delegated to you; or drop --memory/--pids/--cpus", err)
		case "store":
			return fault.New(fault.Store, "cannot use pinfold's store", se.Err.Error(),
				"set PINFOLD_STORE to a writable directory", err)
		}
		return fault.New(fault.BadValue, se.Error(), "", "", err)
	}
	if errors.Is(err, native.ErrUnsupported) {
		return fault.New(fault.Unsupported, "the native sandbox is not built for this architecture", "",
			"use an amd64 machine", err)
	}
	var setup *native.SetupError
	if errors.As(err, &setup) {
		if strings.Contains(err.Error(), "idmapped") {
			return fault.New(fault.IDMap, "cannot show the workspace with its owner's ids",
				err.Error(), "run pinfold as the workspace's owner instead of root", err)
		}
		return fault.New(fault.Setup, "cannot build the sandbox: "+err.Error(),
			"the kernel refused a step; user namespaces may be disabled or restricted",
			"check that sysctl user.max_user_namespaces is above 0 (and kernel.unprivileged_userns_clone=1 "+
				"or the AppArmor userns restriction off, where the distribution has them)", err)
	}
	return fault.New(fault.Internal, err.Error(), "", "please report this", err)
}
