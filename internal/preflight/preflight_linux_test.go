package preflight

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/pinfold/pinfold/internal/cgroup"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

// fakeProc is a /proc tree with the files the preflight reads.
type fakeProc struct {
	root, sys, proc string
}

func newFakeProc(t testing.TB, files map[string]string) *fakeProc {
	t.Helper()
	root := t.TempDir()
	f := &fakeProc{root: root, sys: root + "/proc/sys", proc: root + "/proc"}
	base := map[string]string{
		"sys/user/max_user_namespaces": "15000\n",
		"sys/kernel/random/boot_id":    "11111111-2222-3333-4444-555555555555\n",
		"self/ns/user":                 "",
		"self/cgroup":                  "0::/user.slice/a.scope\n",
	}
	for k, v := range files {
		base[k] = v
	}
	for k, v := range base {
		p := filepath.Join(f.proc, k)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func cgroupsMissing() (*cgroup.System, error) {
	return nil, fmt.Errorf("detecting cgroups: %w", cgroup.ErrUnsupported)
}

// cacheHost is a fake host with a cache directory whose user-namespace
// probe counts its calls and fails while *fail is set.
func cacheHost(t testing.TB, f *fakeProc, probes *atomic.Int64, fail *atomic.Bool) *Host {
	h := NewHost()
	h.ProcSys, h.Proc = f.sys, f.proc
	run := filepath.Join(f.root, "run", "pinfold")
	os.MkdirAll(filepath.Dir(run), 0o755)
	h.RunDir = func(int) string { return run }
	h.ProbeUserns = func(context.Context) error {
		probes.Add(1)
		if fail.Load() {
			return syscall.EPERM
		}
		return nil
	}
	return h
}

func TestPreflightCache(t *testing.T) {
	f := newFakeProc(t, nil)
	var probes atomic.Int64
	var fail atomic.Bool
	h := cacheHost(t, f, &probes, &fail)
	ctx := context.Background()
	native := Needs{Native: true}

	check := func(step string, need Needs, wantErr bool, wantMiss bool) {
		t.Helper()
		runs := preflightRuns.Load()
		err := run(ctx, need, h)
		if (err != nil) != wantErr {
			t.Fatalf("%s: error %v", step, err)
		}
		if miss := preflightRuns.Load() != runs; miss != wantMiss {
			t.Fatalf("%s: cache miss %v, want %v", step, miss, wantMiss)
		}
	}
	check("first", native, false, true)
	cache := filepath.Join(h.RunDir(0), cacheFile)
	st, err := os.Stat(cache)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("cache file: %v %v", st, err)
	}
	check("second", native, false, false)
	check("third", native, false, false)
	if probes.Load() != 1 {
		t.Errorf("probed %d times", probes.Load())
	}
	check("nothing needed", Needs{}, false, false)

	// Limits are checked once, then cached alongside (needs root: real
	// cgroups).
	if os.Geteuid() == 0 {
		check("limits", Needs{Native: true, Limits: true, Limit: cgroup.Limits{Pids: 10}}, false, true)
		check("limits again", Needs{Native: true, Limits: true, Limit: cgroup.Limits{Pids: 20}}, false, false)
		check("native still cached", native, false, false)
		if b, _ := os.ReadFile(cache); !strings.Contains(string(b), " 1 2 -\n") {
			t.Errorf("cache %q: want native and the pids controller", b)
		}
		check("memory not yet", Needs{Limits: true, Limit: cgroup.Limits{MemoryBytes: 64 << 20}}, false, true)
	}

	// A new boot misses the cache.
	os.WriteFile(filepath.Join(f.sys, "kernel/random/boot_id"), []byte("99999999-2222-3333-4444-555555555555\n"), 0o644)
	check("new boot", native, false, true)
	check("new boot cached", native, false, false)

	// Failures are not cached, and a fixed host passes at once.
	os.Remove(cache)
	fail.Store(true)
	check("failing", native, true, true)
	if _, err := os.Stat(cache); err == nil {
		t.Error("a failure was cached")
	}
	check("failing again", native, true, true)
	fail.Store(false)
	check("fixed", native, false, true)
	check("fixed cached", native, false, false)

	// Stale, corrupt or foreign files are ignored and replaced.
	for name, content := range map[string]string{
		"old":     cacheMagic + " 99999999-2222-3333-4444-555555555555 0 1000 1 7 -\n",
		"corrupt": "pinfold-preflight 1 garbage\n",
		"other":   "hello\n",
		"no eol":  cacheMagic + " 99999999-2222-3333-4444-555555555555 0 1000 1 7 -",
	} {
		if os.Geteuid() != 0 && name == "old" {
			continue
		}
		os.WriteFile(cache, []byte(content), 0o600)
		check(name, native, false, true)
		check(name+" rewritten", native, false, false)
	}
	os.Remove(cache)
	os.Symlink("/proc/self/status", cache)
	check("symlink", native, false, true)
}

func TestPreflightNoCacheDir(t *testing.T) {
	f := newFakeProc(t, nil)
	var probes atomic.Int64
	var fail atomic.Bool
	h := cacheHost(t, f, &probes, &fail)
	h.RunDir = func(int) string { return "" }
	for i := 0; i < 2; i++ {
		if err := run(context.Background(), Needs{Native: true}, h); err != nil {
			t.Fatal(err)
		}
	}
	if probes.Load() != 2 {
		t.Errorf("probed %d times without a cache directory", probes.Load())
	}
}

func TestErrors(t *testing.T) {
	f := newFakeProc(t, map[string]string{"sys/user/max_user_namespaces": "0\n"})
	var probes atomic.Int64
	var fail atomic.Bool
	fail.Store(true)
	h := cacheHost(t, f, &probes, &fail)
	h.EUID = 0 // root's messages
	h.Cgroups = cgroupsMissing
	err := run(context.Background(), Needs{Native: true, Limits: true}, h)
	var pe *Error
	if !errors.As(err, &pe) || len(pe.Checks) != 2 || pe.Checks[0].ID != "userns" || !pe.Limits() {
		t.Fatalf("%#v", err)
	}
	if !errors.Is(err, cgroup.ErrUnsupported) || !errors.Is(err, syscall.EPERM) {
		t.Errorf("%v does not unwrap to its causes", err)
	}
	msg := err.Error()
	for _, s := range []string{"user namespaces", "user.max_user_namespaces is 0", "fix: sysctl -w user.max_user_namespaces=15000", "cgroup controllers"} {
		if !strings.Contains(msg, s) {
			t.Errorf("message %q lacks %q", msg, s)
		}
	}
	// Invalid limits are the caller's mistake, not the host's.
	fail.Store(false)
	h.Cgroups = cgroup.Detect
	err = run(context.Background(), Needs{Limits: true, Limit: cgroup.Limits{Pids: -1}}, h)
	if !errors.Is(err, cgroup.ErrInvalid) || errors.As(err, &pe) {
		t.Errorf("invalid limits: %v", err)
	}
}

// TestPreflightHost runs the real preflight: this machine can run
// sandboxes with limits as root.
func TestPreflightHost(t *testing.T) {
	requireRoot(t)
	h := NewHost()
	dir := filepath.Join(t.TempDir(), "pinfold")
	h.RunDir = func(int) string { return dir }
	need := Needs{Native: true, Limits: true}
	if err := run(context.Background(), need, h); err != nil {
		t.Fatal(err)
	}
	runs := preflightRuns.Load()
	if err := run(context.Background(), need, h); err != nil || preflightRuns.Load() != runs {
		t.Fatalf("second preflight: %v, hit=%v", err, preflightRuns.Load() == runs)
	}
}

func BenchmarkPreflightCached(b *testing.B) {
	// The real boot id and probes; only the cache directory is a
	// temporary one, so the benchmark writes nothing to /run.
	dir := filepath.Join(b.TempDir(), "pinfold")
	host := func() *Host {
		h := NewHost()
		h.RunDir = func(int) string { return dir }
		return h
	}
	ctx := context.Background()
	need := Needs{Native: true}
	if err := run(ctx, need, host()); err != nil {
		b.Fatal(err)
	}
	runs := preflightRuns.Load()
	for b.Loop() {
		if err := run(ctx, need, host()); err != nil {
			b.Fatal(err)
		}
	}
	if preflightRuns.Load() != runs {
		b.Fatal("the cache missed")
	}
}
