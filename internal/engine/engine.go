// Package engine runs a resolved Plan on a runtime and returns its
// outcome. It owns everything a run needs besides the command itself:
// the pre_run hooks, the runtime's preflight, caches, the base and the
// capability image, the changeset (start, finish, apply), the disk volume
// of --disk, the violation log, and the typed errors of each step. The CLI,
// sessions and the HTTP API are thin callers: they make a Plan (Resolve),
// Start it with their streams, forward signals and print the Outcome.
//
//	p, err := eng.Resolve(ctx, &engine.Request{Args: args, Flags: flags})
//	run, err := eng.Start(ctx, p, engine.Options{Stdout: os.Stdout, Stderr: os.Stderr})
//	out, err := run.Wait()
//
// Errors are *fault.Error values (a stable code, what, why and fix) or the
// sandbox package's typed errors; callers map them with errors.As.
package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"

	"github.com/pinfold/pinfold/internal/capability"
	"github.com/pinfold/pinfold/internal/changeset"
	"github.com/pinfold/pinfold/internal/disk"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/netpolicy"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/internal/store"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/container"
	"github.com/pinfold/pinfold/sandbox/gvisor"
	"github.com/pinfold/pinfold/sandbox/host"
	"github.com/pinfold/pinfold/sandbox/kubernetes"
	"github.com/pinfold/pinfold/sandbox/native"
)

// Engine runs Plans. Its zero value is not usable: make it with New.
type Engine struct {
	// Store is pinfold's store directory.
	Store string
	// Version is pinfold's version, recorded in the images it builds.
	Version string
	// Report hears what a run does besides the command (notices, builds);
	// nil is silent.
	Report Reporter
	// Runtimes makes the runtime of a backend; nil means Runtime on the
	// engine's Store. A runtime that keeps anything in pinfold's store
	// must be made on Store (native.WithStore and the like).
	Runtimes func(name string) (sandbox.Runtime, error)
}

// New returns an engine on the store dir.
func New(store string) *Engine { return &Engine{Store: store} }

// Reporter hears what the engine does besides running the command: it is
// how the CLI shows progress. Every method may be called from any
// goroutine, one at a time.
type Reporter interface {
	// Notice is a one-line message for the user.
	Notice(msg string)
	// Progress is a step of a long operation (op: "base debian-12",
	// "image 3f9a1c2b7d04", "pull REF"...).
	Progress(op string, s Step)
	// Done ends a long operation; err is nil when it succeeded.
	Done(op string, err error)
	// Output receives the raw output of the tools a long operation runs.
	Output(op string) io.Writer
}

// Step is where a long operation is.
type Step struct {
	// Phase is what it does now ("Retrieving", "Unpacking", "Setting up").
	Phase string
	// Item is what it does that to ("libc6 2.36-9"), or "".
	Item string
	// Done counts items (or bytes) of the phase so far; Total is their
	// number when known, else 0.
	Done, Total int64
	Bytes       bool
}

// stepper turns a tool's step lines into Steps, counting each phase.
type stepper struct {
	r     Reporter
	op    string
	phase string
	n     int64
}

func (s *stepper) step(line string) {
	if s.r == nil {
		return
	}
	phase, item, _ := strings.Cut(line, " ")
	if phase != s.phase {
		s.phase, s.n = phase, 0
	}
	s.n++
	s.r.Progress(s.op, Step{Phase: phase, Item: item, Done: s.n})
}

// runtimes holds the built-in runtimes made so far, per store and
// backend: a runtime keeps what it found once (the container engines'
// probe, where runsc is) for the process, and each store has its own
// (bases, network helper, launch records and temporary directories live
// in the runtime's store).
var runtimes struct {
	sync.Mutex
	m map[[2]string]sandbox.Runtime
}

// kube is the kubernetes runtime, which keeps nothing in the store; it
// remembers its cluster's check. Made on first use: a package-level call
// would be one more init on every run.
var (
	kubeOnce sync.Once
	kube     *kubernetes.Runtime
)

// Runtime returns the built-in runtime of a backend name on the store
// dir, made once per store and name.
func Runtime(store, name string) (sandbox.Runtime, error) {
	switch name {
	case host.Name:
		return host.Runtime{}, nil
	case kubernetes.Name:
		kubeOnce.Do(func() { kube = kubernetes.Default() })
		return kube, nil
	case native.Name, container.PodmanName, container.DockerName, gvisor.Name:
	default:
		return nil, fault.New(fault.BadValue, "unknown backend "+name, "", "use native, gvisor, podman, docker, kubernetes, host or auto", nil)
	}
	runtimes.Lock()
	defer runtimes.Unlock()
	key := [2]string{store, name}
	if rt, ok := runtimes.m[key]; ok {
		return rt, nil
	}
	var rt sandbox.Runtime
	switch name {
	case native.Name:
		rt = native.NewRuntime(native.WithStore(store))
	case container.PodmanName:
		rt = container.Podman(container.WithStore(store))
	case container.DockerName:
		rt = container.Docker(container.WithStore(store))
	case gvisor.Name:
		rt = gvisor.NewRuntime(gvisor.WithStore(store))
	}
	if runtimes.m == nil {
		runtimes.m = map[[2]string]sandbox.Runtime{}
	}
	runtimes.m[key] = rt
	return rt, nil
}

func (e *Engine) runtime(name string) (sandbox.Runtime, error) {
	if e.Runtimes != nil {
		return e.Runtimes(name)
	}
	return Runtime(e.Store, name)
}

func (e *Engine) notice(format string, args ...any) {
	if e.Report != nil {
		e.Report.Notice(fmt.Sprintf(format, args...))
	}
}

// Options are a caller's side of a run: its streams and hooks.
type Options struct {
	// Stdin is read only when the plan is interactive; Stdout and Stderr
	// receive the command's output (with a terminal, Stdout shows it).
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Rows and Cols are the terminal's first size (Plan.TTY).
	Rows, Cols uint16
	// Mark, when set, hears the steps of the run and turns on the
	// sandbox's own trace (Result.Trace).
	Mark func(step string)
	// Handoff, when set, asks that the calling process become the
	// runtime's small waiter once the command runs. Setting it locks the
	// calling goroutine to its thread before the sandbox is made.
	Handoff *Handoff
	// BeforeCommand, when set, is called once the sandbox is made, just
	// before the command starts: what must be in place before its first
	// output (the caller's signal handlers) is waited for there.
	BeforeCommand func()
}

// Handoff asks for the fast path of a run that has nothing left to do
// once its command runs but wait for it (CanHandoff): the runtime's
// process replaces the caller with a small waiter (sandbox.Handoffer),
// which finishes the run's changeset with "pinfold __finish". When the
// plan or the runtime does not allow it, or the hand-off fails, the run
// goes on in this process as usual.
type Handoff struct {
	// TimeoutMsg, TmpFullMsg and Report are the waiter's (see
	// sandbox.HandoffOptions).
	TimeoutMsg, TmpFullMsg string
	Report                 *os.File
	// MemoryMsg, OOMMsg and PidsMsg are the waiter's messages for the
	// limits hit (sandbox.HandoffOptions). A plan with a memory or pids
	// limit hands off only when its messages are given: a front end that
	// needs Result.LimitsHit itself (a session's record) leaves them out.
	MemoryMsg, OOMMsg, PidsMsg string
	// LimitsHitFile is where the waiter writes the limits hit
	// (sandbox.HandoffOptions.LimitsHitFile), for a front end that records
	// them.
	LimitsHitFile string
	// Record, when set, asks for the launch to be recorded for replay,
	// if the plan allows it: the caller gives its key and what the plan
	// was read from, the engine the rest.
	Record *sandbox.LaunchRecord
	// Ready, when set, is called last before the hand-off, with the id of
	// the run's changeset ("" for none): false keeps the run here.
	Ready func(proc sandbox.Process, changeset string) bool
}

// Outcome is how a run ended.
type Outcome struct {
	Result  *sandbox.Result
	Backend string
	// Changeset is what became of the run's changeset; nil without one.
	Changeset *ChangesetOutcome
	// ViolationLog is the file the network policy logged to, "" when
	// nothing was blocked.
	ViolationLog string
	// Missing are loader errors the command's output showed, each with
	// the capability that provides the library when one does.
	Missing []capability.Finding
}

// LimitDisk is Result.LimitsHit's name for the disk cap of a run
// (--disk), which the engine watches rather than the sandbox.
const LimitDisk = "disk"

// Run is a started run.
type Run struct {
	Process sandbox.Process
	// SharesTerminal is true when the command is in the caller's process
	// group on its terminal: the terminal's Ctrl-C reaches it directly,
	// so the caller must not forward SIGINT or SIGQUIT too.
	SharesTerminal bool

	e       *Engine
	p       *plan.Plan
	o       Options
	sb      sandbox.Sandbox
	cs      *changeset.Changeset
	unlock  func()
	vol     *disk.Volume
	vlog    *netpolicy.RunLog
	errTail *tailBuffer
	once    sync.Once
	out     *Outcome
	err     error
}

// CanHandoff reports whether a run of p has nothing to do once its command
// runs but wait for it, then record a new changeset of the workspace,
// have the network helper report what it blocked and the cgroups the
// limits hit (a disk's writes are kept by "pinfold __finish"): no terminal
// or output to watch, no captures, --apply or reused changeset. Such a run
// can hand its process to a small waiter (Options.Handoff).
// It is the one decision of the fast path's eligibility; recordable adds
// what a replay needs.
func CanHandoff(p *plan.Plan) bool {
	sp := &p.Sandbox
	return p.Mode == "sandbox" && p.Backend == native.Name && !p.TTY &&
		len(p.Captures) == 0 && p.Changeset == "" && !p.Apply &&
		sp.Base.Kind == sandbox.BaseHost
}

// recordable reports whether a run of p that hands off can also be
// recorded for replay (see Handoff.Record): on top of CanHandoff, the plan
// has no step on the host (hooks, caches, secrets, capabilities, a
// lockfile's audit), a network the replay can reach (none, or the shared
// helper's), no published ports and no disk (a replay makes no volume).
// Memory, pids and CPU limits are recorded: a replay makes their cgroups
// (initp.LaunchCgroup). The runtime checks what the sandbox depends on.
func recordable(p *plan.Plan) bool {
	sp := &p.Sandbox
	return CanHandoff(p) && p.Disk == 0 &&
		(sp.Network == sandbox.NetworkNone || sp.Network == sandbox.NetworkAllow || sp.Network == sandbox.NetworkOutbound) &&
		len(sp.Net.Publish) == 0 && len(p.Hooks) == 0 && len(p.Caches) == 0 && len(p.Secrets) == 0 &&
		len(p.Capabilities) == 0 && p.Audit.Lockfile == "none configured"
}

// UsesStack reports whether the plan's network goes through pinfold's
// userspace stack (which lives in the calling process for the whole run).
func UsesStack(p *plan.Plan) bool {
	sp := &p.Sandbox
	return sp.Network == sandbox.NetworkOutbound || sp.Network == sandbox.NetworkAllow ||
		sp.Network == sandbox.NetworkNone && len(sp.Net.Publish) > 0
}

// Run starts p and waits for it.
func (e *Engine) Run(ctx context.Context, p *plan.Plan, o Options) (*Outcome, error) {
	r, err := e.Start(ctx, p, o)
	if err != nil {
		return nil, err
	}
	return r.Wait()
}

// Supports refuses (sandbox.UnsupportedError) a sandbox plan its runtime's
// Features do not cover, before anything is built or started: front ends
// that start later (sessions) call it with the plan they resolved.
func (e *Engine) Supports(p *plan.Plan) error {
	if p.Mode == "host" {
		return nil
	}
	rt, err := e.runtime(p.Backend)
	if err != nil {
		return nil // not chosen yet, or unknown: Start says so
	}
	f := rt.Features()
	if err := f.Supports(rt.Name(), &p.Sandbox, nil); err != nil {
		var ue *sandbox.UnsupportedError
		errors.As(err, &ue)
		return Lacks(ue)
	}
	return nil
}

// Lacks is the refusal (PF143) of a plan that asks for what its runtime
// cannot enforce; it wraps ue.
func Lacks(ue *sandbox.UnsupportedError) error {
	fix := "drop that setting, or choose a backend that has it (pinfold doctor lists them; --backend native has every feature)"
	if ue.Fix != "" {
		fix = ue.Fix
	}
	return fault.New(fault.RuntimeLacks, "backend "+ue.Runtime+" cannot run this plan: it cannot enforce the "+ue.Feature+" asked for ("+ue.Asked+")",
		"pinfold never runs a plan with less isolation than it asks for", fix, ue)
}

// Start runs everything p needs before its command, then starts it.
func (e *Engine) Start(ctx context.Context, p *plan.Plan, o Options) (*Run, error) {
	mark := func(step string) {
		if o.Mark != nil {
			o.Mark(step)
		}
	}
	rt, err := e.runtime(p.Backend)
	if err != nil {
		return nil, err
	}
	if p.Mode == "host" {
		// Refused before the hooks run, limits from pinfold.yaml as from
		// flags (see hostSpec).
		spec, f := hostSpec(p), rt.Features()
		if err := f.Supports(rt.Name(), &spec, nil); err != nil {
			return nil, hostRefusal(p, err)
		}
	}
	if p.Mode != "host" {
		// Refused before the hooks run and the base is built (a
		// debian-12 base is minutes of debootstrap); start checks again
		// with what the engine adds to the spec.
		if err := e.Supports(p); err != nil {
			return nil, err
		}
	}
	if err := e.runHooks(ctx, p, o); err != nil {
		return nil, err
	}
	r := &Run{e: e, p: p, o: o, unlock: func() {}}
	if p.Mode == "host" {
		return r, r.start(ctx, rt, hostSpec(p), mark)
	}
	if err := rt.Check(ctx, &p.Sandbox); err != nil {
		return nil, err
	}
	if _, err := os.Lstat(e.Store); e.Store != "" && err == nil {
		// Changesets, launch records and logs go there: only into a
		// store of the caller's that nobody else may write. (One that
		// does not exist yet is made, 0700, by what first needs it.)
		if _, err := store.Open(e.Store); err != nil {
			return nil, fault.New(fault.Store, "cannot use pinfold's store", err.Error(),
				"chmod 700 the store, or set PINFOLD_STORE to a directory of your own", err)
		}
	}
	if err := e.makeCaches(p); err != nil {
		return nil, err
	}
	base, err := e.ensureSystem(ctx, p)
	if err != nil {
		return nil, err
	}
	if p.Image.Verify {
		// What runs is the manifest whose signature checked out, by
		// digest, whatever the tag names by the time it is pulled.
		if base.Kind == sandbox.BaseOCI && base.Path != "" {
			if base.Ref, err = e.verifyArchive(p, base.Path); err != nil {
				return nil, err
			}
		} else if base.Ref, err = e.verifyImage(ctx, p, base.Ref); err != nil {
			return nil, err
		}
	}
	spec := p.Sandbox
	spec.Base = base
	spec.Trace = o.Mark != nil
	if r.cs, r.unlock, err = e.startChangeset(p, &spec); err != nil {
		return nil, err
	}
	if r.cs != nil && p.Disk > 0 {
		if r.vol, err = e.openDisk(ctx, r.cs, p, &spec); err != nil {
			r.dropChangeset()
			return nil, err
		}
	}
	if UsesStack(p) {
		if r.vlog = netpolicy.NewRunLog(e.Store); r.vlog != nil {
			spec.Net.Log = r.vlog
		}
	} else if spec.Network == sandbox.NetworkHost {
		e.notice("the sandbox shares the host's network (--network host): no network policy applies")
	}
	// On bases pinfold builds, a loader error in the output gets a
	// suggestion: the capability that provides the missing library.
	if p.Sandbox.Base.Kind != sandbox.BaseHost && !p.TTY {
		r.errTail = &tailBuffer{w: o.Stderr}
	}
	if err := r.start(ctx, rt, spec, mark); err != nil {
		if r.vol != nil {
			e.dropDisk(r.cs, r.vol)
		}
		r.dropChangeset()
		r.vlog.Close()
		return nil, err
	}
	return r, nil
}

// hostSpec is what a plan in host mode runs with: the host, in the
// workspace, as it is. The top level's sandbox settings do not apply when
// a profile or a flag sends a command to the host (they are for the
// commands that run in a sandbox); what the command's profile and flags
// ask for does, and the top level's too when it chose the host, so that
// the host runtime refuses it rather than run without it.
func hostSpec(p *plan.Plan) sandbox.Spec {
	sp := &p.Sandbox
	s := sandbox.Spec{Workspace: sp.Workspace, Access: sandbox.AccessReadWrite, Network: sandbox.NetworkHost}
	topChose := layerOf(p.Sources["backend"]) == topLevel
	flag := func(key string) bool {
		src := p.Sources[key]
		switch layerOf(src) {
		case "":
			return strings.HasPrefix(src, plan.FromFlag)
		case topLevel:
			return topChose
		}
		return true // the profile dispatch chose for this command
	}
	if flag("access") {
		s.Access = sp.Access
	}
	if flag("network") || flag("allow") {
		s.Network = sp.Network
	}
	if flag("ports") {
		s.Net.Publish = sp.Net.Publish
	}
	if flag("base") {
		s.Base = sp.Base
	}
	if flag("mounts") {
		s.Mounts = sp.Mounts
	}
	if flag("user") {
		s.Root = sp.Root
	}
	if flag("cap_add") {
		s.Capabilities = sp.Capabilities
	}
	if flag("hostname") {
		s.Hostname = sp.Hostname
	}
	// Limits, wherever they come from: one in pinfold.yaml (top level or
	// the profile) is asked for as much as a flag, and the host runtime's
	// Features refuse them rather than run without.
	s.Limits.Memory, s.Limits.Pids, s.Limits.CPUs = sp.Limits.Memory, sp.Limits.Pids, sp.Limits.CPUs
	if flag("capture") {
		for _, c := range p.Captures {
			s.Captures = append(s.Captures, sandbox.Capture{Path: c})
		}
	}
	return s
}

// topLevel is layerOf a setting of pinfold.yaml's top level.
const topLevel = " (top level)"

// layerOf is the config layer a source label ("FILE:LINE (top level)",
// "FILE:LINE (profile NAME)") names, or "" for flags and defaults. The
// file's name may hold " (" too; a profile's name cannot.
func layerOf(src string) string {
	if strings.HasPrefix(src, plan.FromFlag) || !strings.HasSuffix(src, ")") {
		return ""
	}
	if i := strings.LastIndex(src, " ("); i >= 0 {
		return src[i:]
	}
	return ""
}

// hostRefusal explains a host plan the host runtime refuses: limits are
// named with where they came from (a flag, or pinfold.yaml's line).
func hostRefusal(p *plan.Plan, err error) error {
	var ue *sandbox.UnsupportedError
	un := p.HostUnenforced()
	if !errors.As(err, &ue) || !strings.HasSuffix(ue.Feature, "limit") || len(un) == 0 {
		return err
	}
	return fault.New(fault.RuntimeLacks, "backend host cannot enforce the limits this plan asks for: "+strings.Join(un, ", "),
		"a command on the host runs without a sandbox or its cgroup; pinfold never runs a plan with less than it asks for",
		"drop the limits, or set them in the profiles that run in a sandbox rather than at the top level of pinfold.yaml; or run the command in a sandbox (backend: native)", err)
}

// CheckHostLimits refuses, before anything is said or run, a host plan
// with limits the host cannot enforce (the host runtime would refuse it
// when it starts).
func CheckHostLimits(p *plan.Plan) error {
	un := p.HostUnenforced()
	if p.Mode != "host" || len(un) == 0 {
		return nil
	}
	return hostRefusal(p, &sandbox.UnsupportedError{Runtime: "host", Feature: "limit", Asked: strings.Join(un, ", ")})
}

// start makes the sandbox and starts the command.
func (r *Run) start(ctx context.Context, rt sandbox.Runtime, spec sandbox.Spec, mark func(string)) error {
	p, o := r.p, r.o
	cmd := &sandbox.Cmd{Args: p.Command.Args, Env: p.Command.Environ(), Dir: p.Command.Dir, Timeout: p.Timeout,
		TTY: p.TTY, Rows: o.Rows, Cols: o.Cols, Stdout: o.Stdout, Stderr: o.Stderr}
	if p.Interactive {
		cmd.Stdin = o.Stdin
	}
	if r.errTail != nil {
		cmd.Stderr = r.errTail
	}
	f := rt.Features()
	if err := f.Supports(rt.Name(), &spec, cmd); err != nil {
		return err
	}
	handoff := o.Handoff != nil && CanHandoff(p)
	if handoff {
		// The sandbox must be started from the thread that hands off.
		runtime.LockOSThread()
	}
	sb, err := rt.New(ctx, spec)
	if err != nil {
		return err
	}
	mark("pinfold: sandbox prepared")
	if o.BeforeCommand != nil {
		o.BeforeCommand()
	}
	proc, err := sb.Run(ctx, cmd)
	if err != nil {
		sb.Close()
		return err
	}
	r.sb, r.Process = sb, proc
	if st, ok := proc.(interface{ SharesTerminal() bool }); ok {
		r.SharesTerminal = st.SharesTerminal()
	}
	if r.vol != nil {
		// The sandbox holds its own mounts of the volume now.
		r.vol.Detach()
	}
	mark("pinfold: command started")
	if handoff {
		r.handoff(proc)
	}
	return nil
}

// handoff makes the calling process the runtime's waiter for proc, when
// the runtime can. It returns only when that did not happen.
func (r *Run) handoff(proc sandbox.Process) {
	hp, ok := proc.(sandbox.Handoffer)
	if !ok {
		return
	}
	h := r.o.Handoff
	if lim := r.p.Sandbox.Limits; lim.Memory != 0 && (h.MemoryMsg == "" || h.OOMMsg == "") || lim.Pids != 0 && h.PidsMsg == "" {
		return // the front end reports the limits hit itself
	}
	ho := sandbox.HandoffOptions{TimeoutMsg: h.TimeoutMsg, TmpFullMsg: h.TmpFullMsg, Report: h.Report, ViolationLog: r.vlog.Path(),
		MemoryMsg: h.MemoryMsg, OOMMsg: h.OOMMsg, PidsMsg: h.PidsMsg, LimitsHitFile: h.LimitsHitFile}
	id := ""
	if r.cs != nil {
		// The waiter finishes the changeset (FinishHandedOff), holding
		// its lock across the exec; Wait does if the hand-off fails.
		exe, err := os.Executable()
		if err != nil || r.cs.KeepLockOnExec(true) != nil {
			return
		}
		defer r.cs.KeepLockOnExec(false)
		id = r.cs.Meta.ID
		ho.Finish = []string{exe, r.e.Store, id}
	}
	if h.Record != nil && r.e.Store != "" && recordable(r.p) {
		rec := *h.Record
		rec.Empty = PendingDirs(r.e.Store)
		rec.AnyCommand, rec.Stdin = !r.p.Dispatched, r.p.Interactive
		ho.Record = &rec
		if r.cs != nil {
			if rec.MetaTail, _ = changeset.ReplayTail(&r.cs.Meta); rec.MetaTail == "" {
				ho.Record = nil
			}
		}
	}
	if h.Ready != nil && !h.Ready(proc, id) {
		return
	}
	hp.Handoff(ho)
}

// ChangesetID is the id of the run's changeset, "" without one.
func (r *Run) ChangesetID() string {
	if r.cs == nil {
		return ""
	}
	return r.cs.Meta.ID
}

// Signal sends sig to the command.
func (r *Run) Signal(sig os.Signal) error { return r.Process.Signal(sig) }

// Resize changes the size of the command's terminal.
func (r *Run) Resize(rows, cols uint16) error { return r.Process.Resize(rows, cols) }

// Wait waits for the command, then finishes the run: the disk volume's
// writes are kept, the changeset is recorded (and applied with --apply).
func (r *Run) Wait() (*Outcome, error) {
	r.once.Do(func() { r.out, r.err = r.wait() })
	return r.out, r.err
}

func (r *Run) wait() (*Outcome, error) {
	res, err := r.Process.Wait()
	if r.o.Mark != nil {
		r.o.Mark("pinfold: command ended")
	}
	r.sb.Close()
	r.vlog.Close()
	if r.o.Mark != nil {
		r.o.Mark("pinfold: sandbox closed")
	}
	if err != nil {
		if r.vol != nil {
			r.e.dropDisk(r.cs, r.vol)
		}
		r.dropChangeset()
		return nil, err
	}
	out := &Outcome{Result: res, Backend: r.p.Backend, ViolationLog: r.vlog.Written()}
	if r.vol != nil {
		full, err := r.e.closeDisk(context.Background(), r.cs, r.vol)
		if err != nil {
			r.unlock()
			return out, err
		}
		if full {
			res.LimitsHit = append(res.LimitsHit, LimitDisk)
		}
	}
	if r.cs != nil {
		co, err := r.e.finishChangeset(context.Background(), r.cs, r.p, res, r.o.Mark)
		r.unlock()
		out.Changeset = co
		if err != nil {
			return out, err
		}
	}
	if res.ExitCode != 0 && r.errTail != nil {
		out.Missing = missingLibraries(r.errTail.b)
	}
	return out, nil
}

// dropChangeset forgets the changeset of a run that did not happen (a
// reused one stays as it was).
func (r *Run) dropChangeset() {
	if r.cs == nil {
		return
	}
	if r.p.Changeset == "" {
		r.cs.Remove()
	}
	r.unlock()
}

// tailBuffer passes a stream on and keeps its last 64 KiB.
type tailBuffer struct {
	w io.Writer
	b []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	const max = 64 << 10
	t.b = append(t.b, p...)
	if len(t.b) > max {
		t.b = append(t.b[:0], t.b[len(t.b)-max:]...)
	}
	if t.w == nil {
		return len(p), nil
	}
	return t.w.Write(p)
}

// missingLibraries finds loader errors in out, one finding per library.
func missingLibraries(out []byte) []capability.Finding {
	seen := map[string]bool{}
	var fs []capability.Finding
	for _, f := range capability.FromOutput(out) {
		if !seen[f.Evidence] {
			seen[f.Evidence] = true
			fs = append(fs, f)
		}
	}
	return fs
}

// storeError reports a store that cannot be used.
func storeError(what string, err error) error {
	var fe *fault.Error
	if errors.As(err, &fe) {
		return err
	}
	return fault.New(fault.Store, what, err.Error(), "check pinfold's store (pinfold doctor)", err)
}

// Short is an id as people read it: 12 hex digits.
func Short(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
