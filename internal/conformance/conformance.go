// Package conformance is the set of scenarios every pinfold runtime
// passes: the same plans, made from the same flags and pinfold.yaml, run
// through the engine on each runtime (native, podman, docker...), with the
// same expected outcome. A scenario a runtime cannot honour must be
// refused by its Features with a *sandbox.UnsupportedError: the suite
// checks the refusal, so nothing passes by being skipped.
//
// Run is called from a test per target:
//
//	func TestNative(t *testing.T) {
//		conformance.Run(t, conformance.Target{Backend: "native", Runtime: func(store string) sandbox.Runtime {
//			return native.NewRuntime(native.WithStore(store))
//		}})
//	}
package conformance

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/sandbox"
)

// Target is a runtime under test.
type Target struct {
	// Backend is its name on the command line (--backend).
	Backend string
	// Runtime makes the runtime on a store: each scenario has a fresh
	// store, where its engine keeps bases and changesets and the runtime
	// what it keeps (native.WithStore and the like).
	Runtime func(store string) sandbox.Runtime
	// Base is the --base the plans use ("" is the host base).
	Base string
	// Pinfold is the pinfold binary, for the scenarios that run the CLI
	// (kill -9 and pinfold clean).
	Pinfold string
	// Tools is a host directory with netclient, shown at /pinfold-test.
	Tools string
	// Leftovers lists what runs on this target left behind (containers,
	// volumes...) for the cleanup scenario; nil when the runtime leaves
	// nothing a process scan would not find.
	Leftovers func(ctx context.Context) ([]string, error)
	// SysfsShown, when set, says why the target shows its node's sysfs
	// (read-only) where the others show an empty /sys: a known gap the
	// kernel-surfaces scenario reports instead of failing on.
	SysfsShown string
	// GuestKernel, when set, says why the ids the command sees inside
	// (its uid_map) are not host ids: a target whose command runs on a
	// kernel of its own (gVisor's Sentry). The root-only files must stay
	// unreadable all the same; the host ids are its own tests' concern.
	GuestKernel string
	// TTYUnnamed, when set, says why the target's terminal works (sizes,
	// input, output) but has no name under /dev/pts inside: a known gap
	// the tty scenario reports instead of failing on.
	TTYUnnamed string
	// Elsewhere names the scenarios that run on another target of the
	// same backend, configured otherwise, each with why: here they are
	// skipped, saying so. Only, when set, runs just those scenarios.
	Elsewhere map[string]string
	Only      []string
}

// Scenario is one behaviour every runtime must have.
type Scenario struct {
	Name string
	// Needs says whether a runtime's features cover the scenario; nil: all
	// runtimes must run it. A runtime without it must refuse it.
	Needs func(f *sandbox.Features) bool
	Run   func(e *Env)
}

// Run runs every scenario against tg, each as a subtest.
func Run(t *testing.T, tg Target) {
	for _, sc := range Scenarios() {
		if tg.Only != nil && !slices.Contains(tg.Only, sc.Name) {
			continue
		}
		if why, ok := tg.Elsewhere[sc.Name]; ok {
			t.Run(sc.Name, func(t *testing.T) { t.Skip(why) })
			continue
		}
		t.Run(sc.Name, func(t *testing.T) {
			store := t.TempDir()
			rt := tg.Runtime(store)
			f := rt.Features()
			e := &Env{T: t, Target: tg, Runtime: rt, refuse: sc.Needs != nil && !sc.Needs(&f)}
			e.Workspace = t.TempDir()
			os.Chmod(e.Workspace, 0o755)
			e.Engine = engine.New(store)
			e.Engine.Runtimes = func(name string) (sandbox.Runtime, error) {
				if name == tg.Backend {
					return rt, nil
				}
				return engine.Runtime(store, name)
			}
			sc.Run(e)
			if e.refuse && !e.refused {
				t.Errorf("the %s runtime lacks the features of %q, but no run was refused", tg.Backend, sc.Name)
			}
		})
	}
}

// Env is one scenario's run on one target: a fresh workspace and store.
type Env struct {
	T      *testing.T
	Target Target
	// Runtime is the target's runtime on the scenario's store.
	Runtime   sandbox.Runtime
	Engine    *engine.Engine
	Workspace string
	// Config is written to the workspace's pinfold.yaml before each plan,
	// after "version: 1".
	Config string

	refuse, refused bool
}

// Result is a finished run's outcome and output.
type Result struct {
	Out            *engine.Outcome
	Stdout, Stderr string
}

// Plan resolves a plan for args with flags on the target.
func (e *Env) Plan(flags plan.Flags, args ...string) *plan.Plan {
	e.T.Helper()
	cfg := "version: 1\n" + e.Config
	if err := os.WriteFile(filepath.Join(e.Workspace, "pinfold.yaml"), []byte(cfg), 0o644); err != nil {
		e.T.Fatal(err)
	}
	flags.Backend = e.Target.Backend
	if flags.Base == "" {
		flags.Base = e.Target.Base
	}
	if e.Target.Tools != "" {
		flags.Mounts = append(flags.Mounts, e.Target.Tools+":/pinfold-test:ro")
	}
	p, err := e.Engine.Resolve(context.Background(), &engine.Request{Args: args, Flags: flags, Cwd: e.Workspace})
	if err != nil {
		e.T.Fatalf("resolving %v: %v", args, err)
	}
	return p
}

// Start starts p with opts. On a target that must refuse the scenario it
// checks the refusal and returns nil.
func (e *Env) Start(p *plan.Plan, opts engine.Options) *engine.Run {
	e.T.Helper()
	r, err := e.Engine.Start(context.Background(), p, opts)
	if e.refuse {
		e.checkRefusal(err)
		if r != nil {
			r.Process.Signal(os.Kill)
			r.Wait()
		}
		return nil
	}
	if err != nil {
		e.T.Fatalf("starting %v on %s: %v", p.Command.Args, e.Target.Backend, err)
	}
	return r
}

func (e *Env) checkRefusal(err error) {
	e.T.Helper()
	var ue *sandbox.UnsupportedError
	if !errors.As(err, &ue) {
		e.T.Fatalf("the %s runtime lacks what this scenario needs: want a refusal (*sandbox.UnsupportedError), got %v",
			e.Target.Backend, err)
	}
	e.refused = true
}

// Refusing reports whether the target must refuse this scenario.
func (e *Env) Refusing() bool { return e.refuse }

// Exec runs args with flags to the end and returns its outcome; nil when
// the target refused it (as it must).
func (e *Env) Exec(flags plan.Flags, args ...string) *Result {
	e.T.Helper()
	return e.ExecWith(flags, engine.Options{}, args...)
}

// ExecWith is Exec with the caller's options (stdin, terminal size).
func (e *Env) ExecWith(flags plan.Flags, opts engine.Options, args ...string) *Result {
	e.T.Helper()
	p := e.Plan(flags, args...)
	var stdout, stderr syncBuffer
	if opts.Stdout == nil {
		opts.Stdout = &stdout
	}
	if opts.Stderr == nil {
		opts.Stderr = &stderr
	}
	r := e.Start(p, opts)
	if r == nil {
		return nil
	}
	out, err := r.Wait()
	if err != nil {
		e.T.Fatalf("running %v on %s: %v", args, e.Target.Backend, err)
	}
	return &Result{Out: out, Stdout: stdout.String(), Stderr: stderr.String()}
}

// StartErr starts args and returns the error of Start, or of Wait when
// Start succeeded (runtimes may report an exec failure at either).
func (e *Env) StartErr(flags plan.Flags, args ...string) error {
	e.T.Helper()
	p := e.Plan(flags, args...)
	r, err := e.Engine.Start(context.Background(), p, engine.Options{Stdout: io.Discard, Stderr: io.Discard})
	if err != nil {
		return err
	}
	_, err = r.Wait()
	return err
}

// syncBuffer is a bytes.Buffer safe for the writers of a run.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// lineWatcher passes output on and signals the first line holding want.
type lineWatcher struct {
	syncBuffer
	want string
	seen chan struct{}
	once sync.Once
}

func newLineWatcher(want string) *lineWatcher {
	return &lineWatcher{want: want, seen: make(chan struct{})}
}

func (w *lineWatcher) Write(p []byte) (int, error) {
	n, err := w.syncBuffer.Write(p)
	if strings.Contains(w.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return n, err
}

// wait waits for the line, failing the test after d.
func (w *lineWatcher) wait(t *testing.T, d time.Duration) bool {
	t.Helper()
	select {
	case <-w.seen:
		return true
	case <-time.After(d):
		t.Errorf("no %q within %s; output so far: %q", w.want, d, w.String())
		return false
	}
}

// has helpers for Needs.
func hasNetwork(n sandbox.Network) func(*sandbox.Features) bool {
	return func(f *sandbox.Features) bool { return slices.Contains(f.Networks, n) }
}

func hasAccess(a sandbox.Access) func(*sandbox.Features) bool {
	return func(f *sandbox.Features) bool { return slices.Contains(f.Access, a) }
}

// isExecError reports an ExecError whose cause is want (fs.ErrNotExist,
// fs.ErrPermission).
func isExecError(err error, want error) bool {
	var ee *sandbox.ExecError
	return errors.As(err, &ee) && errors.Is(ee.Err, want)
}
