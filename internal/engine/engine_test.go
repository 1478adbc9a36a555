package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/native"
)

// newEngine returns an engine on a fresh store and a workspace with a
// pinfold.yaml holding config.
func newEngine(t *testing.T, config string) (*engine.Engine, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("runs real sandboxes as root")
	}
	ws := t.TempDir()
	os.Chmod(ws, 0o755)
	if err := os.WriteFile(filepath.Join(ws, "pinfold.yaml"), []byte("version: 1\n"+config), 0o644); err != nil {
		t.Fatal(err)
	}
	return engine.New(t.TempDir()), ws
}

func resolve(t *testing.T, e *engine.Engine, ws string, f plan.Flags, args ...string) *plan.Plan {
	t.Helper()
	p, err := e.Resolve(context.Background(), &engine.Request{Args: args, Flags: f, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunKeepsAndAppliesAChangeset(t *testing.T) {
	e, ws := newEngine(t, "")
	var out bytes.Buffer
	p := resolve(t, e, ws, plan.Flags{}, "sh", "-c", "echo hi > new; echo done")
	o, err := e.Run(context.Background(), p, engine.Options{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if o.Result.ExitCode != 0 || out.String() != "done\n" || o.Backend != native.Name {
		t.Fatalf("got %+v %q", o.Result, out.String())
	}
	cs := o.Changeset
	if cs == nil || cs.Empty || cs.Applied || cs.Counts.Added != 1 {
		t.Fatalf("changeset %+v", cs)
	}
	if _, err := os.Stat(filepath.Join(ws, "new")); err == nil {
		t.Fatal("the workspace changed before the apply")
	}
	// Its record is written unsynced: fingerprints lost to a crash (an
	// empty file) leave an apply that needs --force.
	fpFile := filepath.Join(e.Store, "changesets", cs.ID, "fingerprints.json")
	if err := os.Truncate(fpFile, 0); err != nil {
		t.Fatal(err)
	}
	c, err := e.OpenChangeset(cs.ID, ws)
	if err != nil {
		t.Fatal(err)
	}
	var fe *fault.Error
	if _, err := e.Apply(context.Background(), c, nil, false); !errors.As(err, &fe) || fe.Code != fault.Conflict {
		t.Fatalf("apply without fingerprints: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "new")); err == nil {
		t.Fatal("applied without fingerprints")
	}
	if _, err := e.Apply(context.Background(), c, nil, true); err != nil {
		t.Fatalf("apply --force: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "new")); string(b) != "hi\n" {
		t.Fatalf("forced apply wrote %q", b)
	}
	// --apply writes it when the command succeeds.
	p = resolve(t, e, ws, plan.Flags{Apply: true}, "sh", "-c", "echo applied > other")
	if o, err = e.Run(context.Background(), p, engine.Options{}); err != nil || !o.Changeset.Applied {
		t.Fatalf("--apply: %v %+v", err, o.Changeset)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "other")); string(b) != "applied\n" {
		t.Fatalf("applied file: %q", b)
	}
	// A run that writes nothing leaves no changeset.
	p = resolve(t, e, ws, plan.Flags{}, "true")
	if o, err = e.Run(context.Background(), p, engine.Options{}); err != nil || !o.Changeset.Empty {
		t.Fatalf("empty run: %v %+v", err, o.Changeset)
	}
}

// restricted is the native runtime claiming fewer features, as a runtime
// without cgroups would.
type restricted struct{ *native.Runtime }

func (r restricted) Features() sandbox.Features {
	f := r.Runtime.Features()
	f.Memory = false
	f.Networks = []sandbox.Network{sandbox.NetworkNone}
	return f
}

func TestRuntimeRefusesWhatItCannotEnforce(t *testing.T) {
	e, ws := newEngine(t, "")
	e.Runtimes = func(name string) (sandbox.Runtime, error) {
		return restricted{native.NewRuntime(native.WithStore(e.Store))}, nil
	}
	for _, f := range []plan.Flags{{Memory: "64m"}, {Network: "outbound"}} {
		p := resolve(t, e, ws, f, "true")
		_, err := e.Run(context.Background(), p, engine.Options{})
		var ue *sandbox.UnsupportedError
		if !errors.As(err, &ue) {
			t.Errorf("%+v: got %v, want an UnsupportedError", f, err)
		}
	}
	// Nothing the refused runs started is left in the store.
	if ents, _ := os.ReadDir(filepath.Join(e.Store, "changesets")); len(ents) != 0 {
		t.Errorf("refused runs left %d changesets", len(ents))
	}
	p := resolve(t, e, ws, plan.Flags{Access: "rw"}, "true")
	if o, err := e.Run(context.Background(), p, engine.Options{}); err != nil || o.Result.ExitCode != 0 {
		t.Errorf("a plan within the features: %v", err)
	}
}

func TestHostRefusesIsolationFlags(t *testing.T) {
	e, ws := newEngine(t, "host:\n  allow: [\"*\"]\n")
	var out bytes.Buffer
	p := resolve(t, e, ws, plan.Flags{Backend: "host"}, "sh", "-c", "pwd; exit 3")
	o, err := e.Run(context.Background(), p, engine.Options{Stdout: &out})
	if err != nil || o.Result.ExitCode != 3 || strings.TrimSpace(out.String()) != ws {
		t.Fatalf("host run: %v %+v %q", err, o, out.String())
	}
	for _, f := range []plan.Flags{{Backend: "host", Memory: "64m"}, {Backend: "host", Network: "none"},
		{Backend: "host", Mounts: []string{ws + ":/x"}}, {Backend: "host", Access: "ro"}} {
		p := resolve(t, e, ws, f, "true")
		_, err := e.Run(context.Background(), p, engine.Options{})
		var ue *sandbox.UnsupportedError
		if !errors.As(err, &ue) {
			t.Errorf("host with %+v: got %v, want an UnsupportedError", f, err)
		}
	}
}

// TestHostProfileSettingsAreAsked: what the profile that sends a command
// to the host asks for is refused like a flag, never dropped; the top
// level's sandbox settings are for the commands that run in a sandbox.
func TestHostProfileSettingsAreAsked(t *testing.T) {
	cfg := "network: none\nprofiles:\n  onhost:\n    backend: host\n    host: {allow: [\"*\"]}\n%s" +
		"dispatch:\n  - command: sh\n    profile: onhost\n"
	for _, c := range []struct{ prof, feature string }{
		{"", ""},
		{"    network: none\n", "network"},
		{"    access: ro\n", "workspace access"},
		{"    mounts: [/etc:/x]\n", "mounts"},
		{"    hostname: box\n", "hostname"},
	} {
		e, ws := newEngine(t, fmt.Sprintf(cfg, c.prof))
		p := resolve(t, e, ws, plan.Flags{}, "sh", "-c", "exit 4")
		o, err := e.Run(context.Background(), p, engine.Options{})
		var ue *sandbox.UnsupportedError
		switch {
		case c.feature == "" && (err != nil || o.Result.ExitCode != 4):
			t.Errorf("host profile under a top-level network: none: %v", err)
		case c.feature != "" && (!errors.As(err, &ue) || ue.Feature != c.feature):
			t.Errorf("host profile with %q: got %v, want the %s refused", c.prof, err, c.feature)
		}
	}
}

// TestHostLayers: a profile's settings are asked for on the host whoever
// chose it (the top level, --backend host), and a config file's name with
// " (" in it does not hide them.
func TestHostLayers(t *testing.T) {
	for _, c := range []struct {
		name, cfg string
		flags     plan.Flags
	}{
		{"pinfold (copy).yaml", "version: 1\nprofiles:\n  onhost:\n    backend: host\n    host: {allow: [\"*\"]}\n    network: none\n" +
			"dispatch:\n  - command: sh\n    profile: onhost\n", plan.Flags{}},
		{"pinfold.yaml", "version: 1\nbackend: host\nhost: {allow: [\"*\"]}\nprofiles:\n  strict:\n    network: none\n" +
			"dispatch:\n  - command: sh\n    profile: strict\n", plan.Flags{}},
		{"pinfold.yaml", "version: 1\nprofiles:\n  onhost:\n    host: {allow: [\"*\"]}\n    network: none\n" +
			"dispatch:\n  - command: sh\n    profile: onhost\n", plan.Flags{Backend: "host"}},
	} {
		e, ws := newEngine(t, "")
		path := filepath.Join(ws, c.name)
		if err := os.WriteFile(path, []byte(c.cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := e.Resolve(context.Background(), &engine.Request{Args: []string{"sh", "-c", "exit 4"}, Cwd: ws, Config: path, Flags: c.flags})
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.Run(context.Background(), p, engine.Options{})
		var ue *sandbox.UnsupportedError
		if !errors.As(err, &ue) || ue.Feature != "network" {
			t.Errorf("%s %+v: the profile's network: none on the host: %v, want it refused", c.name, c.flags, err)
		}
	}
}

// TestLostFingerprintsRerun: a rerun into a changeset whose fingerprints
// were lost keeps it needing --force: the rerun's view of the originals
// may already hold the user's edits.
func TestLostFingerprintsRerun(t *testing.T) {
	e, ws := newEngine(t, "")
	os.WriteFile(filepath.Join(ws, "f"), []byte("v1\n"), 0o644)
	o, err := e.Run(context.Background(), resolve(t, e, ws, plan.Flags{}, "sh", "-c", "echo run1 > f"), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id := o.Changeset.ID
	if err := os.Truncate(filepath.Join(e.Store, "changesets", id, "fingerprints.json"), 0); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ws, "f"), []byte("the user's v2\n"), 0o644)
	if _, err := e.Run(context.Background(), resolve(t, e, ws, plan.Flags{Changeset: id}, "true"), engine.Options{}); err != nil {
		t.Fatal(err)
	}
	c, err := e.OpenChangeset(id, ws)
	if err != nil {
		t.Fatal(err)
	}
	var fe *fault.Error
	if _, err := e.Apply(context.Background(), c, nil, false); !errors.As(err, &fe) || fe.Code != fault.Conflict {
		b, _ := os.ReadFile(filepath.Join(ws, "f"))
		t.Errorf("apply after lost fingerprints and a rerun: %v; f = %q", err, b)
	}
}

// TestFailedApplyBlocksNothing: an apply that fails (an immutable
// workspace) leaves its changeset open, and other commands of the store,
// which finish interrupted applies first, go on.
func TestFailedApplyBlocksNothing(t *testing.T) {
	e, ws := newEngine(t, "")
	o, err := e.Run(context.Background(), resolve(t, e, ws, plan.Flags{}, "sh", "-c", "echo n > new"), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("chattr", "+i", ws).Run(); err != nil {
		t.Skip("no chattr +i here:", err)
	}
	defer exec.Command("chattr", "-i", ws).Run()
	c, err := e.OpenChangeset(o.Changeset.ID, ws)
	if err != nil {
		t.Fatal(err)
	}
	var fe *fault.Error
	if _, err := e.Apply(context.Background(), c, nil, false); !errors.As(err, &fe) || fe.Code != fault.ApplyFailed {
		t.Fatalf("apply into an immutable workspace: %v", err)
	}
	if err := e.Recover(context.Background()); err != nil {
		t.Fatalf("the next command: %v", err)
	}
	other := t.TempDir()
	if _, err := e.Run(context.Background(), resolve(t, e, other, plan.Flags{}, "true"), engine.Options{}); err != nil {
		t.Fatalf("a run elsewhere: %v", err)
	}
	// The same workspace waits for that apply: another changeset's apply
	// and a rerun into this one are refused.
	o2, err := e.Run(context.Background(), resolve(t, e, ws, plan.Flags{}, "sh", "-c", "echo m > more"), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c2, err := e.OpenChangeset(o2.Changeset.ID, ws)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Apply(context.Background(), c2, nil, false); !errors.As(err, &fe) || !strings.Contains(err.Error(), "not finished") {
		t.Errorf("another apply into the workspace: %v", err)
	}
	if _, err := e.Run(context.Background(), resolve(t, e, ws, plan.Flags{Changeset: o.Changeset.ID}, "true"), engine.Options{}); !errors.As(err, &fe) || !strings.Contains(err.Error(), "not finished") {
		t.Errorf("a rerun into the changeset being applied: %v", err)
	}
	exec.Command("chattr", "-i", ws).Run()
	if c, err = e.OpenChangeset(o.Changeset.ID, ws); err != nil {
		t.Fatalf("the changeset after the failed apply: %v", err)
	}
	if _, err := e.Apply(context.Background(), c, nil, false); err != nil {
		t.Fatalf("apply once the workspace is writable: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "new")); string(b) != "n\n" {
		t.Errorf("new = %q", b)
	}
	if c2, err = e.OpenChangeset(o2.Changeset.ID, ws); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Apply(context.Background(), c2, nil, false); err != nil {
		t.Errorf("the other changeset once the first is applied: %v", err)
	}
}

// TestStoppedApplyChecksEdits: the rest of an apply that stopped is not
// written over a file edited since (neither by the next command, which
// finishes such applies, nor by applying it again) unless forced.
func TestStoppedApplyChecksEdits(t *testing.T) {
	e, ws := newEngine(t, "")
	os.Mkdir(filepath.Join(ws, "imm"), 0o755)
	os.WriteFile(filepath.Join(ws, "z"), []byte("orig\n"), 0o644)
	o, err := e.Run(context.Background(), resolve(t, e, ws, plan.Flags{}, "sh", "-c", "mkdir imm/new; echo changed > z"), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("chattr", "+i", filepath.Join(ws, "imm")).Run(); err != nil {
		t.Skip("no chattr +i here:", err)
	}
	defer exec.Command("chattr", "-i", filepath.Join(ws, "imm")).Run()
	c, err := e.OpenChangeset(o.Changeset.ID, ws)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Apply(context.Background(), c, nil, false); err == nil {
		t.Fatal("apply into an immutable directory succeeded")
	}
	// imm/new failed; z, after it, is not written yet. The user edits it
	// and makes imm writable again.
	os.WriteFile(filepath.Join(ws, "z"), []byte("my edit\n"), 0o644)
	exec.Command("chattr", "-i", filepath.Join(ws, "imm")).Run()
	if err := e.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "z")); string(b) != "my edit\n" {
		t.Fatalf("the next command finished the apply over the user's edit: z = %q", b)
	}
	var fe *fault.Error
	if _, err := e.Apply(context.Background(), c, nil, false); !errors.As(err, &fe) || fe.Code != fault.Conflict {
		t.Fatalf("apply again over the edit: %v", err)
	}
	if _, err := e.Apply(context.Background(), c, nil, true); err != nil {
		t.Fatalf("apply --force: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "z")); string(b) != "changed\n" {
		t.Errorf("forced: z = %q", b)
	}
}

func TestMissingCommandIsAnExecError(t *testing.T) {
	e, ws := newEngine(t, "")
	p := resolve(t, e, ws, plan.Flags{}, "pinfold-no-such-command")
	_, err := e.Run(context.Background(), p, engine.Options{})
	var ee *sandbox.ExecError
	if !errors.As(err, &ee) {
		t.Fatalf("got %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.Store, "changesets")); len(ents) != 0 {
		t.Errorf("a run that never started left %d changesets", len(ents))
	}
}

func TestResolveErrorsAreCoded(t *testing.T) {
	e, ws := newEngine(t, "network: sideways\n")
	_, err := e.Resolve(context.Background(), &engine.Request{Args: []string{"true"}, Cwd: ws})
	var fe *fault.Error
	if !errors.As(err, &fe) || fe.Code != fault.ConfigError {
		t.Fatalf("got %v", err)
	}
}

func TestCanHandoff(t *testing.T) {
	e, ws := newEngine(t, "")
	cases := []struct {
		f    plan.Flags
		want bool
	}{
		{plan.Flags{Access: "ro"}, true},
		{plan.Flags{}, true}, // the waiter finishes the changeset
		{plan.Flags{Apply: true}, false},
		{plan.Flags{Capture: []string{"/tmp"}}, false},
		{plan.Flags{Access: "ro", Memory: "64m", Pids: "64"}, true}, // the waiter reports the limits hit
		{plan.Flags{Disk: "1g"}, true},                              // pinfold __finish keeps the disk's writes
		{plan.Flags{Access: "ro", TTY: true}, false},
		{plan.Flags{Access: "ro", Network: "allow", Allow: []string{"example.test"}}, true}, // the helper reports
	}
	for _, c := range cases {
		if got := engine.CanHandoff(resolve(t, e, ws, c.f, "true")); got != c.want {
			t.Errorf("%+v: got %v", c.f, got)
		}
	}
}

func TestAutoPicksTheFirstRuntimeThatCan(t *testing.T) {
	e, ws := newEngine(t, "")
	e.Runtimes = func(name string) (sandbox.Runtime, error) {
		if name == native.Name {
			return restricted{native.NewRuntime(native.WithStore(e.Store))}, nil
		}
		return nil, errors.New("not built in")
	}
	p := resolve(t, e, ws, plan.Flags{Backend: "auto"}, "true")
	if p.Backend != native.Name || !strings.Contains(p.BackendReason, "auto: native") {
		t.Errorf("got %q %q", p.Backend, p.BackendReason)
	}
	_, err := e.Resolve(context.Background(), &engine.Request{Args: []string{"true"}, Flags: plan.Flags{Backend: "auto", Memory: "64m"}, Cwd: ws})
	var fe *fault.Error
	if !errors.As(err, &fe) || fe.Code != fault.Preflight || !strings.Contains(fe.Why, "native: cannot enforce the memory limit") ||
		!strings.Contains(fe.Why, "podman: not available") {
		t.Errorf("no runtime can: got %v", err)
	}
}

// TestConcurrentAppliesToOneWorkspace applies 40 changesets that each
// write the same file at once: exactly one wins, the others are refused as
// conflicts, and the file holds the winner's version.
func TestConcurrentAppliesToOneWorkspace(t *testing.T) {
	e, ws := newEngine(t, "")
	os.WriteFile(filepath.Join(ws, "shared"), []byte("original\n"), 0o644)
	const n = 40
	ids := make([]string, n)
	for i := range n {
		p := resolve(t, e, ws, plan.Flags{}, "sh", "-c", fmt.Sprintf("echo version %d > shared", i))
		o, err := e.Run(context.Background(), p, engine.Options{})
		if err != nil || o.Changeset == nil || o.Changeset.Empty {
			t.Fatalf("run %d: %v %+v", i, err, o)
		}
		ids[i] = o.Changeset.ID
	}
	type result struct {
		i   int
		err error
	}
	results := make(chan result, n)
	start := make(chan struct{})
	for i, id := range ids {
		go func() {
			<-start
			cs, err := e.OpenChangeset(id, "")
			if err == nil {
				var unlock func()
				if unlock, err = engine.Lock(cs); err == nil {
					_, err = e.Apply(context.Background(), cs, nil, false)
					unlock()
				}
			}
			results <- result{i, err}
		}()
	}
	close(start)
	winner, wins := -1, 0
	for range n {
		r := <-results
		var fe *fault.Error
		switch {
		case r.err == nil:
			winner, wins = r.i, wins+1
		case errors.As(r.err, &fe) && fe.Code == fault.Conflict:
		default:
			t.Errorf("apply %d: %v, want success or a conflict", r.i, r.err)
		}
	}
	b, _ := os.ReadFile(filepath.Join(ws, "shared"))
	if wins != 1 || string(b) != fmt.Sprintf("version %d\n", winner) {
		t.Fatalf("%d applies succeeded, the file holds %q (winner %d)", wins, b, winner)
	}
}

// TestNoConfigReadsNone: with NoConfig no pinfold.yaml is read, neither
// one found walking up from the directory nor one named.
func TestNoConfigReadsNone(t *testing.T) {
	e, ws := newEngine(t, "pre_run: \"true\"\nnetwork: sideways\n")
	p, err := e.Resolve(context.Background(), &engine.Request{Args: []string{"true"}, Cwd: ws, NoConfig: true})
	if err != nil || len(p.Hooks) != 0 || p.Audit.Config != "" {
		t.Fatalf("NoConfig read the workspace's pinfold.yaml: %v %+v", err, p)
	}
	_, err = e.Resolve(context.Background(), &engine.Request{Args: []string{"true"}, Cwd: ws, NoConfig: true, Config: filepath.Join(ws, "pinfold.yaml")})
	var fe *fault.Error
	if !errors.As(err, &fe) || fe.Code != fault.ConfigError || !strings.Contains(fe.What, "none may be read") {
		t.Fatalf("NoConfig with a config named: %v", err)
	}
}
