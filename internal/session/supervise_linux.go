package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pinfold/pinfold/internal/agent"
	"github.com/pinfold/pinfold/internal/changeset"
	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/internal/procstat"
	"github.com/pinfold/pinfold/internal/units"
	"github.com/pinfold/pinfold/sandbox"
)

// SuperviseCommand is the hidden subcommand of the supervisor.
const SuperviseCommand = "__session-supervise"

// StartRequest is what a session is started from: the same request as a
// run's, without the command.
type StartRequest struct {
	Flags  plan.Flags `json:"flags"`
	Config string     `json:"config,omitempty"`
	Cwd    string     `json:"cwd"`
	Frozen bool       `json:"frozen,omitempty"`
	Name   string     `json:"name,omitempty"`
	Tenant string     `json:"tenant,omitempty"`
	// Idle ends the session after this long without a connection.
	Idle time.Duration `json:"idle,omitempty"`
}

// startError is what a supervisor that could not start reports.
type startError struct {
	Code string `json:"code,omitempty"`
	What string `json:"what"`
	Why  string `json:"why,omitempty"`
	Fix  string `json:"fix,omitempty"`
	Exit int    `json:"exit,omitempty"`
}

// Resolve makes the plan of a session: the run's plan with the agent as
// its command, its home and run directory bound in.
func Resolve(ctx context.Context, eng *engine.Engine, req *StartRequest, dir string) (*plan.Plan, error) {
	idle := "0"
	if req.Idle > 0 {
		idle = req.Idle.String()
	}
	args := []string{agent.AgentPath, agent.AgentCommand, idle}
	// A tenant's workspace is written by the tenant and its sandbox: no
	// pinfold.yaml is read for its session, here or in the supervisor
	// that resolves it again (its pre_run hooks would run on the host).
	// What a tenant may have comes from the server's policy only.
	p, err := eng.Resolve(ctx, &engine.Request{Args: args, Flags: req.Flags, Config: req.Config, Cwd: req.Cwd, Frozen: req.Frozen,
		NoConfig: req.Tenant != ""})
	if err != nil {
		return nil, err
	}
	if p.Mode != "sandbox" {
		return nil, fault.New(fault.SessionRefused, "a session needs a sandbox", "the plan runs on the host (backend host)",
			"use --backend native, podman or docker", nil)
	}
	// What the runtime cannot give is refused before a session record
	// is made.
	if err := eng.Supports(p); err != nil {
		return nil, err
	}
	if p.Sandbox.Limits.Pids > 0 && p.Sandbox.Limits.Pids < 8 {
		return nil, fault.New(fault.SessionRefused, "a session needs --pids of 8 or more", "its agent runs threads of its own", "raise --pids", nil)
	}
	p.TTY, p.Interactive, p.Apply = false, false, false
	if dir != "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		// A pod does not see this machine's files: the kubernetes runtime
		// copies the agent in, gives the pod a home and run directory of
		// its own and serves the agent's socket in the host's run
		// directory, which the pod never writes (hence read-only there).
		kube := p.Backend == "kubernetes"
		p.Sandbox.Mounts = append(p.Sandbox.Mounts,
			sandboxMount(exe, agent.AgentPath, true),
			sandboxMount(filepath.Join(dir, "run"), agent.RunDir, kube),
			sandboxMount(filepath.Join(dir, "home"), agent.Home, kube))
	}
	env := p.Command.Env[:0:0]
	for _, v := range p.Command.Env {
		if v.Name != "HOME" {
			env = append(env, v)
		}
	}
	p.Command.Env = append(env, plan.EnvVar{Name: "HOME", Value: agent.Home, From: "session"})
	return p, nil
}

// Spawn starts the supervisor of a new session from req and waits until
// the session runs (or could not start). exe is pinfold's binary ("" the
// running one).
func Spawn(ctx context.Context, st *Store, storeDir, exe string, req *StartRequest) (*Record, error) {
	r, err := st.Create(req.Name, req.Tenant)
	if err != nil {
		return nil, fault.New(fault.SessionRefused, "cannot create the session", err.Error(), "", err)
	}
	if req.Idle > 0 {
		r.Idle = req.Idle.String()
		st.Save(r)
	}
	fail := func(err error) (*Record, error) {
		r.State, r.Error, r.Ended = StateFailed, err.Error(), time.Now().UTC()
		st.Save(r)
		os.RemoveAll(filepath.Join(st.Path(r.ID), "run"))
		os.RemoveAll(filepath.Join(st.Path(r.ID), "home"))
		return nil, err
	}
	b, _ := json.Marshal(req)
	if err := os.WriteFile(filepath.Join(st.Path(r.ID), "request.json"), b, 0o600); err != nil {
		return fail(err)
	}
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return fail(err)
		}
	}
	log, err := os.OpenFile(st.LogPath(r.ID), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fail(err)
	}
	defer log.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	cmd := exec.Command(exe, SuperviseCommand, r.ID)
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), "PINFOLD_STORE="+storeDir)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.ExtraFiles = []*os.File{pw}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	pw.Close()
	if err != nil {
		pr.Close()
		return fail(err)
	}
	// Reaped when it ends, which may be long after this returns: a
	// server that spawns sessions for days must not collect zombies.
	go cmd.Wait()
	var msg struct {
		OK    bool        `json:"ok"`
		Error *startError `json:"error"`
	}
	dec := json.NewDecoder(pr)
	derr := dec.Decode(&msg)
	pr.Close()
	if derr != nil || !msg.OK {
		if msg.Error == nil {
			msg.Error = &startError{What: "the session's supervisor ended before the session started", Fix: "see " + st.LogPath(r.ID)}
		}
		fe := fault.New(fault.Code(msg.Error.Code), msg.Error.What, msg.Error.Why, msg.Error.Fix, nil)
		if fe.Code == "" {
			fe.Code = fault.SessionRefused
		}
		if msg.Error.Exit != 0 {
			fe.Exit = msg.Error.Exit
		}
		// The supervisor records the failure itself; a killed one does not.
		if cur, err := st.load(r.ID); err == nil && cur.Live() {
			fail(fe)
		}
		return nil, fe
	}
	return st.load(r.ID)
}

// Supervise runs the session id of the store: the supervisor process,
// started by Spawn with the readiness pipe on fd 3. It returns the exit
// status. A failure to start is classified (engine.Classify) here, where
// the plan is known, and reported to Spawn with its code.
func Supervise(ctx context.Context, eng *engine.Engine, id string) int {
	sv := &supervisor{st: Open(eng.Store), id: id, ready: os.NewFile(3, "ready")}
	r, err := sv.st.load(id)
	if err != nil {
		sv.report(map[string]any{"error": startError{What: "no session " + id, Why: err.Error()}})
		return 1
	}
	sv.r = r
	var req StartRequest
	b, err := os.ReadFile(filepath.Join(sv.st.Path(id), "request.json"))
	if err == nil {
		err = json.Unmarshal(b, &req)
	}
	if err != nil {
		return sv.failed(err)
	}
	// Signals end the session; the terminal it came from is not ours.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	if err := eng.Recover(ctx); err != nil {
		return sv.failed(err)
	}
	if sv.p, err = Resolve(ctx, eng, &req, sv.st.Path(id)); err != nil {
		return sv.failed(err)
	}
	r.Pid, r.PidStart = os.Getpid(), procstat.StartTime(os.Getpid())
	r.Workspace, r.Backend = sv.p.Sandbox.Workspace, sv.p.Backend
	sv.st.Save(r)
	opts := engine.Options{Stdout: os.Stdout, Stderr: os.Stderr}
	handingOff := false
	// Once the agent runs, this process has nothing to do but wait: when
	// the engine finds the plan can (engine.CanHandoff), it becomes the
	// native runtime's small waiter, which execs pinfold __finish to record
	// the changeset when the agent ends (Store.Finished records the
	// session then). A session then costs the host its sandbox and a few
	// kilobytes, not a Go process.
	opts.Handoff = &engine.Handoff{
		TimeoutMsg: "pinfold: session " + id + ": killed: timeout",
		TmpFullMsg: "pinfold: session " + id + ": /tmp is full",
		// The network helper reports what it blocked in the session's log.
		Report: os.Stderr,
		// A session with limits hands off too: the waiter says which
		// limit the session hit in its log, and writes it for the record
		// (Store.Finished, check).
		MemoryMsg:     "pinfold: session " + id + ": limit hit: out of memory (limit " + units.FormatSize(sv.p.Sandbox.Limits.Memory) + ")",
		OOMMsg:        "pinfold: session " + id + ": killed: out of memory (limit " + units.FormatSize(sv.p.Sandbox.Limits.Memory) + ")",
		PidsMsg:       fmt.Sprintf("pinfold: session %s: limit hit: process limit, fork refused (limit %d)", id, sv.p.Sandbox.Limits.Pids),
		LimitsHitFile: filepath.Join(sv.st.Path(id), limitsHitFile),
		Ready: func(proc sandbox.Process, changeset string) bool {
			if !sv.waitUp(ctx) {
				return false // Start returns and the session goes on as below
			}
			sv.r.Changeset = changeset
			sv.running(proc)
			signal.Reset(syscall.SIGTERM, syscall.SIGINT) // the waiter forwards them to the agent
			handingOff = true
			return true
		},
	}
	run, err := eng.Start(ctx, sv.p, opts)
	if handingOff {
		// Still here: the hand-off failed.
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	}
	if err != nil {
		return sv.failed(err)
	}
	r.Changeset = run.ChangesetID()
	if r.State != StateRunning {
		if !sv.waitUp(ctx) {
			run.Process.Signal(syscall.SIGKILL)
			out, _ := run.Wait()
			why := "its agent did not answer within 10 s"
			if out != nil && out.Result != nil {
				why = fmt.Sprintf("its agent ended with status %d", out.Result.ExitCode)
			}
			return sv.failed(fault.New(fault.SessionRefused, "the session did not start", why, "see "+sv.st.LogPath(id), nil))
		}
		sv.running(run.Process)
	}
	go func() {
		for s := range sigs {
			run.Signal(s)
		}
	}()
	out, err := run.Wait()
	sv.ended(out, err)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pinfold: session %s: %v\n", id, err)
		return 1
	}
	return 0
}

// supervisor is a session's supervisor: its record, its plan once
// resolved, and the readiness pipe Spawn waits on.
type supervisor struct {
	st    *Store
	id    string
	r     *Record
	p     *plan.Plan
	ready *os.File
}

// report answers Spawn once; later reports are dropped.
func (sv *supervisor) report(v any) {
	if sv.ready != nil {
		json.NewEncoder(sv.ready).Encode(v)
		sv.ready.Close()
		sv.ready = nil
	}
}

// failed records that the session could not start, with err classified
// against the plan, and reports it to Spawn.
func (sv *supervisor) failed(err error) int {
	err = engine.Classify(err, sv.p)
	se := startError{What: err.Error()}
	var fe *fault.Error
	if errors.As(err, &fe) {
		se = startError{Code: string(fe.Code), What: fe.What, Why: fe.Why, Fix: fe.Fix, Exit: fe.Exit}
	}
	r := sv.r
	r.State, r.Error, r.Ended = StateFailed, err.Error(), time.Now().UTC()
	sv.st.Save(r)
	os.RemoveAll(filepath.Join(sv.st.Path(sv.id), "run"))
	os.RemoveAll(filepath.Join(sv.st.Path(sv.id), "home"))
	sv.report(map[string]any{"error": se})
	return 1
}

// waitUp waits (10 s at most) for the session's agent to answer.
func (sv *supervisor) waitUp(ctx context.Context) bool {
	sock := sv.st.Sock(sv.id)
	for i := 0; i < 2000; i++ {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := agent.Call(cctx, sock, &agent.Request{Op: "ping"})
		cancel()
		if err == nil {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// running records the session running, pausable when proc's cgroup can
// be frozen, and reports it started.
func (sv *supervisor) running(proc sandbox.Process) {
	r := sv.r
	if np, ok := proc.(interface{ Pid() int }); ok && r.Freezer == "" {
		// Pausable; a host without a freezer only cannot pause.
		if dir, v2, err := sv.st.setupFreezer(sv.id, np.Pid()); err == nil {
			r.Freezer, r.FreezerV2 = dir, v2
		} else {
			fmt.Fprintf(os.Stderr, "pinfold: session %s cannot be paused: %v\n", sv.id, err)
		}
	}
	r.State = StateRunning
	sv.st.Save(r)
	sv.report(map[string]any{"ok": true})
}

// ended records the session stopped, why, and its changeset's counts,
// and removes its run and home directories.
func (sv *supervisor) ended(out *engine.Outcome, err error) {
	st, id, r := sv.st, sv.id, sv.r
	// A fresh read: pause and resume write the record too.
	if cur, lerr := st.load(id); lerr == nil {
		r = cur
	}
	r.State, r.Ended = StateStopped, time.Now().UTC()
	st.removeFreezer(id)
	os.RemoveAll(filepath.Join(st.Path(id), "run"))
	os.RemoveAll(filepath.Join(st.Path(id), "home"))
	if out != nil && out.Result != nil {
		res := out.Result
		switch {
		case res.Reason == "exited" && res.ExitCode == agent.ExitStopped:
			r.Reason = "stopped"
		case res.Reason == "exited" && res.ExitCode == agent.ExitIdle:
			r.Reason = "idle"
		case len(res.LimitsHit) > 0:
			r.Reason = "limit hit: " + strings.Join(res.LimitsHit, ", ")
		default:
			r.Reason = string(res.Reason) + " " + strconv.Itoa(res.ExitCode)
		}
		if c := out.Changeset; c != nil {
			if c.Empty {
				r.Changeset = ""
			}
			r.Added, r.Modified, r.Deleted = c.Counts.Added, c.Counts.Modified, c.Counts.Deleted
		}
	}
	if err != nil {
		r.Error = err.Error()
	}
	st.Save(r)
}

func sandboxMount(src, dst string, ro bool) sandbox.Mount {
	return sandbox.Mount{Source: src, Target: dst, ReadOnly: ro}
}

// Stop ends a session: the agent is asked to stop (everything in the
// sandbox ends with it), then its supervisor is sent SIGTERM, then
// SIGKILL, each after grace. It returns the record as it ended.
func Stop(ctx context.Context, st *Store, r *Record, grace time.Duration) (*Record, error) {
	if !r.Live() {
		return r, nil
	}
	if r.Freezer != "" {
		// Frozen processes cannot end: thawed first, whatever the record
		// says (a pause that failed half way recorded nothing).
		freeze(r.Freezer, r.FreezerV2, false)
	}
	var lerr error // the record's last read, when it failed
	ended := func(d time.Duration) *Record {
		deadline := time.Now().Add(d)
		for {
			cur, err := st.load(r.ID)
			if lerr = err; err == nil {
				cur = st.check(cur)
				if !cur.Live() {
					return cur
				}
			}
			if time.Now().After(deadline) {
				return nil
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err := agent.Call(cctx, st.Sock(r.ID), &agent.Request{Op: "stop"})
	cancel()
	if err == nil {
		if cur := ended(grace); cur != nil {
			return cur, nil
		}
	}
	if r.Pid > 0 && supervisorAlive(r) {
		syscall.Kill(r.Pid, syscall.SIGTERM)
		if cur := ended(grace); cur != nil {
			return cur, nil
		}
		if supervisorAlive(r) {
			syscall.Kill(r.Pid, syscall.SIGKILL)
		}
	}
	if cur := ended(5 * time.Second); cur != nil {
		return cur, nil
	}
	if lerr != nil {
		return nil, fault.New(fault.SessionRefused, "session "+r.ID+" did not stop", "its record cannot be read: "+lerr.Error(),
			"see pinfold session ls; pinfold clean removes what is left", lerr)
	}
	return nil, fault.New(fault.SessionRefused, "session "+r.ID+" did not stop", "its supervisor (pid "+strconv.Itoa(r.Pid)+") still runs",
		"kill it, then run pinfold clean", nil)
}

// Abort ends a session that never became the caller's (a snapshot it was
// to start from could not be restored): it stops, and its record goes,
// and its changeset too when the session made it (dropChangeset; never
// one it was started into with --changeset), so that nothing of it is
// left to list or review.
func Abort(ctx context.Context, st *Store, r *Record, dropChangeset bool) error {
	cur, err := Stop(ctx, st, r, 5*time.Second)
	if err != nil {
		return err
	}
	if dropChangeset && cur.Changeset != "" {
		cs, err := changeset.Open(filepath.Dir(st.Dir), cur.Changeset)
		if err == nil {
			unlock, err := cs.Lock()
			if err != nil {
				return err
			}
			err = cs.Remove()
			unlock()
			if err != nil {
				return err
			}
		}
	}
	return st.Remove(cur)
}

// Pause freezes every process of a running session.
func Pause(st *Store, r *Record) (*Record, error) {
	return setPaused(st, r, true)
}

// Resume thaws a paused session.
func Resume(st *Store, r *Record) (*Record, error) {
	return setPaused(st, r, false)
}

func setPaused(st *Store, r *Record, on bool) (*Record, error) {
	from, to, verb := StateRunning, StatePaused, "pause"
	if !on {
		from, to, verb = StatePaused, StateRunning, "resume"
	}
	notFrom := func(state string) error {
		return fault.New(fault.SessionEnded, "cannot "+verb+" session "+r.ID+": it is "+state, "",
			map[bool]string{true: "only a running session pauses (pinfold session ls)", false: "only a paused session resumes (pinfold session ls)"}[on], nil)
	}
	if r.State != from {
		return nil, notFrom(r.State)
	}
	// Under the session's lock, on the record as it is now: a check that
	// records its end (and thaws it, so that its killed processes die)
	// is neither undone by a freeze nor overwritten with a live state,
	// and a pause and a resume at once end in the state of the last.
	unlock, err := st.lock(r.ID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	cur, err := st.load(r.ID)
	if err != nil {
		return nil, err
	}
	if cur.State != from || cur.Pid > 0 && !supervisorAlive(cur) {
		state := cur.State
		if cur.State == from {
			state = "ending (its supervisor is gone)"
		}
		return nil, notFrom(state)
	}
	if err := freeze(cur.Freezer, cur.FreezerV2, on); err != nil {
		return nil, fault.New(fault.SessionRefused, "cannot "+verb+" session "+r.ID, err.Error(),
			"pause needs the native runtime and a cgroup freezer pinfold may write (run as root)", err)
	}
	cur.State = to
	if err := st.Save(cur); err != nil {
		return nil, err
	}
	return cur, nil
}
