package cli_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A first run's init is started by the launcher before the Go runtime,
// from the store's spawn hint, and adopted by the Go side only when the
// hint is what it would have sent itself (initp.SpawnFirst). A traced run
// shows the adoption in its timeline; every other outcome must leave no
// init behind.

const adoptedMark = "pinfold: init adopted from the launcher"

// tracedFirst runs args traced, in ws, as a first run (no launch record
// is written for a traced run), and reports whether the launcher's init
// was adopted.
func tracedFirst(t *testing.T, ws string, args ...string) bool {
	t.Helper()
	return strings.Contains(traced(t, ws, args...), adoptedMark)
}

// subreaper makes the test process the reaper of whatever pinfold leaves
// behind, so that leftovers can be counted.
func subreaper(t *testing.T) {
	t.Helper()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
		for {
			if pid, _ := unix.Wait4(-1, nil, unix.WNOHANG|unix.WALL, nil); pid <= 0 {
				return
			}
		}
	})
}

// childrenOf lists the live processes whose parent is pid.
func childrenOf(pid int) []int {
	var kids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[0] != "Z" && f[1] == strconv.Itoa(pid) {
			kids = append(kids, p)
		}
	}
	return kids
}

// noLeftovers fails unless every process pinfold left behind (reparented
// to this subreaper) is gone within a second, reaping them.
func noLeftovers(t *testing.T, what string) {
	t.Helper()
	end := time.Now().Add(time.Second)
	for {
		for {
			if pid, _ := unix.Wait4(-1, nil, unix.WNOHANG|unix.WALL, nil); pid <= 0 {
				break
			}
		}
		kids := childrenOf(os.Getpid())
		if len(kids) == 0 {
			return
		}
		if time.Now().After(end) {
			var names []string
			for _, k := range kids {
				b, _ := os.ReadFile("/proc/" + strconv.Itoa(k) + "/cmdline")
				names = append(names, strconv.Itoa(k)+":"+string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
			}
			t.Fatalf("%s left processes behind: %v", what, names)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// childrenWhileRunning waits until a process under pid (a child or a
// grandchild) runs a command line starting with prefix, and returns pid's
// children then.
func childrenWhileRunning(t *testing.T, pid int, prefix string) []int {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		kids := childrenOf(pid)
		for _, k := range kids {
			for _, g := range append([]int{k}, childrenOf(k)...) {
				if b, _ := os.ReadFile("/proc/" + strconv.Itoa(g) + "/cmdline"); strings.HasPrefix(string(b), prefix) {
					return kids
				}
			}
		}
	}
	t.Fatalf("no %q started under %d", prefix, pid)
	return nil
}

func TestLaunchPrespawnAdopted(t *testing.T) {
	st := needLaunchCache(t)
	subreaper(t)
	ws := t.TempDir()
	if tracedFirst(t, ws, runRO("true")...) {
		t.Fatal("a run without a spawn hint adopted an init")
	}
	hint := filepath.Join(st, "spawn-hint.trace")
	fi, err := os.Stat(hint)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the traced run left no spawn hint of mode 0600: %v", err)
	}
	if !tracedFirst(t, ws, runRO("true")...) {
		t.Fatal("a first run did not adopt the init its launcher started")
	}
	noLeftovers(t, "an adopted run")
	// A plain first run writes the plain hint (with its launch record).
	if _, errs, code := pf(t, ws, runRO("true")...); code != 0 {
		t.Fatalf("status %d: %s", code, errs)
	}
	if _, err := os.Stat(filepath.Join(st, "spawn-hint")); err != nil {
		t.Fatalf("a plain run left no spawn hint: %v", err)
	}
	noLeftovers(t, "a plain run")
	// Plain first runs adopt the init and hand off to the waiter; the
	// init is a child of the main thread, which the hand-off must not end
	// (it did in about one run in a hundred, killing the sandbox).
	for i := 0; i < 100; i++ {
		cmd := exec.Command(pinfold, runRO("true")...)
		cmd.Dir, cmd.Env = ws, append(os.Environ(), "PINFOLD_FIRST="+strconv.Itoa(i))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("first run %d: %v: %s", i, err, out)
		}
	}
	noLeftovers(t, "plain first runs")
}

// dropConfigHints removes the store's config hints, which the launcher
// prefers to the spawn hint (TestLaunchConfigHint), so that a run meets
// the spawn hint alone.
func dropConfigHints(t *testing.T, st string) {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(st, "hints", "*"))
	for _, f := range m {
		os.Remove(f)
	}
}

func TestLaunchPrespawnMismatchDiscarded(t *testing.T) {
	st := needLaunchCache(t)
	subreaper(t)
	ws := t.TempDir()
	tracedFirst(t, ws, runRO("true")...)
	// The hint is of a run in a network namespace; this one has none.
	args := append([]string{"run", "--network", "host"}, runRO("true")[1:]...)
	if tracedFirst(t, ws, args...) {
		t.Fatal("a run whose spawn differs from the hint adopted the launcher's init")
	}
	noLeftovers(t, "a run whose spawn differs")
	// While the command runs, pinfold's one child is the sandbox's init
	// (its first stage is reaped once the root is built): the launcher's
	// is gone (long before the 1 s after which an unclaimed one is
	// discarded anyway).
	tracedFirst(t, ws, runRO("true")...)
	cmd := exec.Command(pinfold, append(args[:len(args)-1], "sleep", "1")...)
	cmd.Dir, cmd.Env = ws, append(os.Environ(), "PINFOLD_TRACE=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// It is killed in the background: gone soon after the command started.
	kids := childrenWhileRunning(t, cmd.Process.Pid, "sleep")
	for end := time.Now().Add(700 * time.Millisecond); len(kids) != 1 && time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		kids = childrenOf(cmd.Process.Pid)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(kids) != 1 {
		t.Errorf("pinfold had %d children while its command ran, want 1", len(kids))
	}
	noLeftovers(t, "a run whose spawn differs")
	// And back: the hint is now the host network's.
	dropConfigHints(t, st)
	if tracedFirst(t, ws, runRO("true")...) {
		t.Fatal("adopted an init spawned for --network host")
	}
	noLeftovers(t, "a run whose spawn differs")
}

// spawnFlags returns the hint with its namespace flags changed: a valid
// spawn that is not the one the Go side would send.
func spawnFlags(t *testing.T, b []byte, clear uint64) []byte {
	t.Helper()
	b = bytes.Clone(b)
	for p := 8; p+8 <= len(b); {
		tag := binary.NativeEndian.Uint16(b[p:])
		n := int(binary.NativeEndian.Uint32(b[p+4:]))
		if tag == 1 && n == 8 { // C_NSFLAGS
			v := binary.NativeEndian.Uint64(b[p+8:])
			binary.NativeEndian.PutUint64(b[p+8:], v&^clear)
			return b
		}
		p += 8 + (n+3)&^3
	}
	t.Fatal("no namespace flags in the spawn hint")
	return nil
}

func TestLaunchPrespawnHintsIgnoredOrRefused(t *testing.T) {
	st := needLaunchCache(t)
	subreaper(t)
	ws := t.TempDir()
	tracedFirst(t, ws, runRO("true")...)
	hint := filepath.Join(st, "spawn-hint.trace")
	good, err := os.ReadFile(hint)
	if err != nil {
		t.Fatal(err)
	}
	write := func(b []byte, mode os.FileMode, uid int) {
		t.Helper()
		os.Remove(hint)
		if err := os.WriteFile(hint, b, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(hint, mode); err != nil {
			t.Fatal(err)
		}
		if uid != os.Geteuid() {
			if err := os.Chown(hint, uid, uid); err != nil {
				t.Fatal(err)
			}
		}
	}
	garbage := append(bytes.Clone(good[:8]), bytes.Repeat([]byte{0xff}, len(good)-8)...)
	for _, c := range []struct {
		name string
		b    []byte
		mode os.FileMode
		uid  int
	}{
		{"another spawn (no IPC namespace)", spawnFlags(t, good, syscall.CLONE_NEWIPC), 0o600, os.Geteuid()},
		{"a corrupted hint (the init refuses it)", garbage, 0o600, os.Geteuid()},
		{"a truncated hint", good[:len(good)-4], 0o600, os.Geteuid()},
		{"another user's hint", good, 0o600, 12345},
		{"a hint others may write", good, 0o666, os.Geteuid()},
	} {
		if c.uid != os.Geteuid() && os.Geteuid() != 0 {
			continue // only root gives a file away
		}
		write(c.b, c.mode, c.uid)
		dropConfigHints(t, st)
		if tracedFirst(t, ws, runRO("true")...) {
			t.Errorf("%s: adopted", c.name)
		}
		noLeftovers(t, c.name)
	}
	// The good hint is adopted again.
	write(good, 0o600, os.Geteuid())
	if !tracedFirst(t, ws, runRO("true")...) {
		t.Error("the restored hint was not adopted")
	}
}

func TestLaunchPrespawnOtherPathsLeaveNothing(t *testing.T) {
	needLaunchCache(t)
	subreaper(t)
	ws := t.TempDir()
	if _, errs, code := pf(t, ws, runRO("true")...); code != 0 {
		t.Fatalf("status %d: %s", code, errs)
	}
	// Help, and a plan refused before any sandbox: the process ends.
	for _, args := range [][]string{
		{"run", "--help", "--", "true"},
		{"run", "--access", "bogus", "--", "true"},
	} {
		pf(t, ws, args...)
		noLeftovers(t, strings.Join(args, " "))
	}
	// Another backend: the init is killed at once, not held for the
	// run's life (the host backend runs what host.allow lets it).
	os.WriteFile(filepath.Join(ws, "pinfold.yaml"), []byte("version: 1\nhost:\n  allow: [\"sleep *\"]\n"), 0o644)
	cmd := exec.Command(pinfold, "run", "--backend", "host", "--", "sleep", "2")
	cmd.Dir = ws
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	// Once the command runs, the init is gone (long before the 1 s after
	// which an unclaimed one is discarded anyway).
	if kids := childrenWhileRunning(t, cmd.Process.Pid, "sleep"); len(kids) != 1 {
		t.Fatalf("pinfold --backend host has %d children, want the command alone (%s)", len(kids), errb.String())
	}
}

const hintMark = "pinfold: config from the launcher's hint"

// traced runs args traced in ws and returns its output.
func traced(t *testing.T, ws string, args ...string) string {
	t.Helper()
	cmd := exec.Command(pinfold, args...)
	cmd.Dir = ws
	cmd.Env = append(os.Environ(), "PINFOLD_TRACE=1")
	cmd.WaitDelay = 2 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v: %s", args, err, out)
	}
	return string(out)
}

// A first run of flags that ran before in the same directory gets its
// init pre-spawned with the config too (a config hint), and the init
// builds the root while the Go runtime starts; the Go side uses it only
// if it is its own config, byte for byte.
func TestLaunchConfigHint(t *testing.T) {
	st := needLaunchCache(t)
	subreaper(t)
	ws := t.TempDir()
	hints := func(suffix string) []string {
		t.Helper()
		m, _ := filepath.Glob(filepath.Join(st, "hints", "*"+suffix))
		return m
	}
	traced(t, ws, runRO("uname", "-n")...)
	h := hints(".trace")
	if len(h) != 1 {
		t.Fatalf("a traced --access ro run left %d config hints, want 1", len(h))
	}
	if fi, err := os.Stat(h[0]); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the config hint is not of mode 0600: %v", err)
	}
	// Another command line, the same flags: the hint is used.
	out := traced(t, ws, runRO("uname", "-n")...)
	if !strings.Contains(out, hintMark) || !strings.Contains(out, "\nsandbox\n") && !strings.HasPrefix(out, "sandbox\n") {
		t.Fatalf("a first run of the same flags did not use the config hint: %s", out)
	}
	noLeftovers(t, "a run from a config hint")
	// A changeset's root is the run's own: no hint.
	traced(t, ws, "run", "--", "true")
	if h := hints(".trace"); len(h) != 1 {
		t.Errorf("a changeset run wrote a config hint: %v", h)
	}
	// A hint whose config is not the one the Go side makes (another
	// hostname): the command runs in a root of the Go side's config.
	good, err := os.ReadFile(h[0])
	if err != nil {
		t.Fatal(err)
	}
	stale := bytes.Replace(good, []byte("sandbox\x00"), []byte("sandbax\x00"), 1)
	if bytes.Equal(stale, good) {
		t.Fatal("no hostname in the config hint")
	}
	if err := os.WriteFile(h[0], stale, 0o600); err != nil {
		t.Fatal(err)
	}
	out = traced(t, ws, runRO("uname", "-n")...)
	if strings.Contains(out, hintMark) || strings.Contains(out, "sandbax") || !strings.Contains(out, "sandbox") {
		t.Fatalf("a stale config hint was used: %s", out)
	}
	noLeftovers(t, "a run with a stale config hint")
	// Written again: used again.
	if out := traced(t, ws, runRO("uname", "-n")...); !strings.Contains(out, hintMark) {
		t.Fatalf("the rewritten config hint was not used: %s", out)
	}
	// A plain first run writes the plain hint (with its launch record),
	// and the next one uses it (its output is the command's alone).
	if _, errs, code := pf(t, ws, runRO("true")...); code != 0 {
		t.Fatalf("status %d: %s", code, errs)
	}
	if h := hints(""); len(h) != 2 { // with the traced runs' one
		t.Fatalf("a plain run left no config hint of its own: %v", h)
	}
	if out, errs, code := pf(t, ws, runRO("uname", "-n")...); code != 0 || out != "sandbox\n" {
		t.Fatalf("status %d, output %q: %s", code, out, errs)
	}
	noLeftovers(t, "plain runs with a config hint")
	// pinfold clean removes them with the launch records.
	if _, errs, code := pf(t, ws, "clean"); code != 0 {
		t.Fatalf("pinfold clean: status %d: %s", code, errs)
	}
	if h := hints(""); len(h) != 0 {
		t.Errorf("pinfold clean left config hints: %v", h)
	}
}

// The launcher starts a run's Go runtime with GOMAXPROCS=1 in its
// environment (launch.c: with_maxprocs), which the Go side takes out
// before anything reads it: a command asking for the host's value gets
// the user's, or none.
func TestLaunchMaxprocsNotPassedOn(t *testing.T) {
	needLaunchCache(t)
	ws := t.TempDir()
	// Also with an environment whose copy with one more variable fills
	// most of the room below the stack, and one too large for it (the
	// runtime then starts as it would have, main sets GOMAXPROCS).
	many := func(n int) []string {
		var e []string
		for i := 0; i < n; i++ {
			e = append(e, "PF_MAXPROCS_TEST_"+strconv.Itoa(i)+"=1")
		}
		return e
	}
	for _, c := range []struct {
		env  []string
		want string
	}{{nil, "unset"}, {[]string{"GOMAXPROCS=3"}, "3"}, {many(1900), "unset"}, {many(2100), "unset"}} {
		for i := 0; i < 2; i++ { // a first run, then a replay
			cmd := exec.Command(pinfold, "run", "--access", "ro", "-e", "GOMAXPROCS", "--", "sh", "-c", "echo ${GOMAXPROCS-unset}")
			cmd.Dir = ws
			cmd.Env = append(slicesDelete(os.Environ(), "GOMAXPROCS="), c.env...)
			out, err := cmd.Output()
			if err != nil || strings.TrimSpace(string(out)) != c.want {
				t.Errorf("with %d more variables, run %d: %q (%v), want %s", len(c.env), i, out, err, c.want)
			}
		}
	}
}

// slicesDelete returns env without the variables starting with prefix.
func slicesDelete(env []string, prefix string) []string {
	var out []string
	for _, e := range env {
		if !strings.HasPrefix(e, prefix) {
			out = append(out, e)
		}
	}
	return out
}
