package cli_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pinfold/pinfold/internal/procstat"
)

// needCgroups skips where pinfold cannot make cgroups (not root: CI runs
// as root).
func needCgroups(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("limits need root here")
	}
}

// goProcesses lists the processes at or below pid that run pinfold's Go
// binary.
func goProcesses(pid int) []int {
	want, _ := filepath.EvalSymlinks(pinfold)
	var found []int
	for _, p := range procstat.Descendants(pid) {
		if exe, err := os.Readlink("/proc/" + strconv.Itoa(p) + "/exe"); err == nil && exe == want {
			found = append(found, p)
		}
	}
	return found
}

// waitNoZombies fails unless pid has no zombie child within 3 seconds
// (the waiter reaps on SIGCHLD, a moment after a child ends).
func waitNoZombies(t *testing.T, what string, pid int) {
	t.Helper()
	var z []string
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if z = procstat.Zombies(pid); len(z) == 0 {
			return
		}
	}
	t.Errorf("%s: zombies under pid %d: %v", what, pid, z)
}

// TestLimitsHandOff: a run with limits hands off like any plain run: no
// Go process stays while the command runs, the cgroups were made before
// it started, and the waiter removes them when it ends.
func TestLimitsHandOff(t *testing.T) {
	needCgroups(t)
	ws := t.TempDir()
	cmd, out := startMarked(t, ws, "--memory", "64m", "--pids", "64", "--cpus", "1")
	pid := cmd.Process.Pid
	waitHandoff(t, pid)
	if g := goProcesses(pid); len(g) != 0 {
		t.Errorf("Go processes during a run with limits: %v", g)
	}
	status, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if !strings.Contains(string(status), "\nThreads:\t1\n") {
		t.Errorf("the waiter is not one thread:\n%s", status)
	}
	groups := cgroupsOf(pid)
	if len(groups) == 0 {
		t.Fatal("no cgroup for the run's limits")
	}
	waitNoZombies(t, "run with limits", pid)
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 42 || !strings.Contains(out.String(), "got-term") {
		t.Errorf("SIGTERM through the waiter: %v %q", err, out.String())
	}
	waitGone(t, time.Second)
	if left := cgroupsOf(pid); len(left) != 0 {
		t.Errorf("the waiter left the run's cgroups: %v (had %v)", left, groups)
	}
}

// TestLimitMessages: a limit hit is reported in the same words and with
// the same status whether the run handed off to the waiter or stayed in
// Go (PINFOLD_TRACE keeps it there).
func TestLimitMessages(t *testing.T) {
	needCgroups(t)
	ws := t.TempDir()
	// The shell keeps 100 MB of output in its memory.
	const hog = `x=$(head -c 100000000 /dev/zero | tr '\0' a)`
	cases := []struct {
		name string
		args []string
		code int
		msgs string
	}{
		{"killed", []string{"--memory", "16m", "--", "sh", "-c", hog + "; echo survived"},
			137, "pinfold: killed: out of memory (limit 16MiB)\n"},
		{"exited", []string{"--memory", "16m", "--", "sh", "-c", "(" + hog + "); exit 3"},
			3, "pinfold: limit hit: out of memory (limit 16MiB)\n"},
		{"pids", []string{"--pids", "8", "--", "sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 5 & done; wait"},
			2, "pinfold: limit hit: process limit, fork refused (limit 8)\n"},
		{"both", []string{"--memory", "16m", "--pids", "8", "--", "sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 5 & done; " + hog},
			2, "pinfold: limit hit: process limit, fork refused (limit 8)\n"},
		{"none", []string{"--memory", "64m", "--pids", "64", "--cpus", "0.5", "--", "sh", "-c", "exit 7"}, 7, ""},
	}
	for _, c := range cases {
		for _, path := range []string{"waiter", "go"} {
			args := append([]string{"run", "--access", "rw"}, c.args...)
			cmd := exec.Command(pinfold, args...)
			cmd.Dir = ws
			if path == "go" {
				cmd.Env = append(os.Environ(), "PINFOLD_TRACE=1")
			}
			cmd.WaitDelay = 2 * time.Second
			var errb strings.Builder
			cmd.Stderr = &errb
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			var msgs strings.Builder
			for _, l := range strings.SplitAfter(errb.String(), "\n") {
				if strings.HasPrefix(l, "pinfold: ") {
					msgs.WriteString(l)
				}
			}
			if code != c.code || msgs.String() != c.msgs {
				t.Errorf("%s through %s: status %d, messages %q (stderr %q); want %d, %q",
					c.name, path, code, msgs.String(), errb.String(), c.code, c.msgs)
			}
			if left := cgroupsOf(cmd.Process.Pid); len(left) != 0 {
				t.Errorf("%s through %s: cgroups left: %v", c.name, path, left)
			}
		}
	}
}

// TestNoZombiesUnderSandboxes: the init's first stage exits once the
// sandbox runs; nothing leaves it a zombie under the process that waits
// for the sandbox (the Go side, the waiter, a replay's waiter, a session's
// supervisor).
func TestNoZombiesUnderSandboxes(t *testing.T) {
	st := needLaunchCache(t)
	ws := freshWorkspace(t)

	cmd, _ := startMarked(t, ws)
	waitHandoff(t, cmd.Process.Pid)
	waitNoZombies(t, "waiter", cmd.Process.Pid)
	cmd.Process.Kill()
	cmd.Wait()

	// The Go side: a traced run does not hand off.
	goRun := exec.Command(pinfold, "run", "--access", "rw", "--", "sleep", "31.9")
	goRun.Dir, goRun.Env = ws, append(os.Environ(), "PINFOLD_TRACE=1")
	if err := goRun.Start(); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(5 * time.Second); len(sleepers("31.9")) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the traced run did not start")
		}
	}
	waitNoZombies(t, "Go supervisor", goRun.Process.Pid)
	goRun.Process.Kill()
	goRun.Wait()

	// A replay: launch.c starts the init and becomes the waiter.
	prime(t, st, ws, runRO("true")...)
	rep := exec.Command(pinfold, runRO("sh", "-c", `echo $PINFOLD_REPLAYED; exec sleep 31.8`)...)
	rep.Dir = ws
	out, err := rep.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "1\n" {
		rep.Process.Kill()
		rep.Wait()
		t.Fatalf("not replayed: %q", line)
	}
	waitNoZombies(t, "replay's waiter", rep.Process.Pid)
	rep.Process.Kill()
	rep.Wait()

	// A replay with limits: TestLimitsReplayed.

	// Sessions, handed off to the waiter with and without limits.
	for _, args := range [][]string{nil, {"--memory", "256m"}} {
		if args != nil && os.Geteuid() != 0 {
			continue
		}
		r := startSession(t, ws, args...)
		waitNoZombies(t, "session "+strings.Join(args, " "), r.Pid)
		pf(t, ws, "session", "stop", "--time", "2", r.ID)
	}
}

// TestDiskHandOff: a run with --disk hands off too; the waiter leaves the
// volume's writes to pinfold __finish, which keeps them, says whether the
// cap was hit, and leaves no volume behind.
func TestDiskHandOff(t *testing.T) {
	needRootForDisk(t)
	ws := changesetWorkspace(t)
	for _, c := range []struct {
		script string
		added  int
		full   bool
	}{
		{"echo data > new.txt; echo started; sleep 0.5", 1, false},
		{"echo started; dd if=/dev/zero of=big.bin bs=1M count=40 2>/dev/null; echo x > after.txt; sleep 0.5", 2, true},
		{"echo started; sleep 0.5", 0, false},
	} {
		cmd := exec.Command(pinfold, "run", "--disk", "32m", "--", "sh", "-c", c.script)
		cmd.Dir, cmd.WaitDelay = ws, 2*time.Second
		var errb strings.Builder
		cmd.Stderr = &errb
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if line, _ := bufio.NewReader(out).ReadString('\n'); line != "started\n" {
			t.Fatalf("%q: printed %q", c.script, line)
		}
		waitHandoff(t, cmd.Process.Pid)
		if g := goProcesses(cmd.Process.Pid); len(g) != 0 {
			t.Errorf("Go processes during a run with --disk: %v", g)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%q: %v %q", c.script, err, errb.String())
		}
		errs := errb.String()
		if c.added == 0 {
			if errs != "" {
				t.Errorf("%q: an empty run printed %q", c.script, errs)
			}
		} else if _, added, _, _ := summary(t, errs); added != c.added || strings.Contains(errs, "hit its disk cap (--disk 32MiB)") != c.full {
			t.Errorf("%q: summary %q", c.script, errs)
		}
		waitNoLeftovers(t)
	}
}

// TestSessionLimitsHandOff: a session with limits hands off like one
// without: no Go process stays under its supervisor's pid, the agent
// runs in the session's cgroups, which the waiter removes when it ends,
// and a session ended while a limit was hit records it as the Go side
// would ("limit hit: pids"; the log says it in pinfold's words).
func TestSessionLimitsHandOff(t *testing.T) {
	needCgroups(t)
	st := storeDir(t)
	// rw: the waiter ends the session, its record is finished by the
	// next look at it; a changeset with a write: by pinfold __finish.
	for _, access := range []string{"rw", "changeset"} {
		ws := t.TempDir()
		r := startSession(t, ws, "--access", access, "--memory", "256m", "--pids", "16")
		waitHandoff(t, r.Pid)
		if g := goProcesses(r.Pid); len(g) != 0 {
			t.Errorf("%s: Go processes under a session with limits: %v", access, g)
		}
		groups := cgroupsOf(r.Pid)
		if len(groups) == 0 {
			t.Fatalf("%s: no cgroups for the session's limits", access)
		}
		// The limits are set on them: the memory group's limit is --memory's.
		var mem []string
		for _, g := range groups {
			for _, f := range []string{"memory.max", "memory.limit_in_bytes"} {
				if b, err := os.ReadFile(filepath.Join(g, f)); err == nil {
					mem = append(mem, strings.TrimSpace(string(b)))
				}
			}
		}
		if len(mem) != 1 || mem[0] != "268435456" {
			t.Errorf("%s: the memory limit in %v: %v, want 268435456", access, groups, mem)
		}
		waitNoZombies(t, "session with limits", r.Pid)
		// Forks beyond the limit are refused; then the agent is killed
		// from inside, which ends the session as its command.
		if _, errs, code := pf(t, ws, "exec", r.ID, "--", "sh", "-c", "echo x > written; for i in $(seq 20); do sleep 5 & done; wait"); code == 0 {
			t.Errorf("%s: 20 processes in a session of 16: %s", access, errs)
		}
		pf(t, ws, "exec", r.ID, "--", "sh", "-c", "kill -KILL $PPID")
		var s sessionRecord
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if s = sessionStatus(t, ws, r.ID); s.State != "running" || time.Now().After(end) {
				break
			}
		}
		if s.State != "stopped" || s.Reason != "limit hit: pids" || access == "changeset" && s.Added != 1 {
			t.Errorf("%s: session record: %s, %q, %d added; want stopped, \"limit hit: pids\"", access, s.State, s.Reason, s.Added)
		}
		if left := cgroupsOf(r.Pid); len(left) != 0 {
			t.Errorf("%s: cgroups left after the session: %v (had %v)", access, left, groups)
		}
		log, _ := os.ReadFile(filepath.Join(st, "sessions", r.ID, "log"))
		if !strings.Contains(string(log), "pinfold: session "+r.ID+": limit hit: process limit, fork refused (limit 16)") {
			t.Errorf("%s: the session's log does not say the limit hit:\n%s", access, log)
		}
	}
}
