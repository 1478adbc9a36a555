package cli_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// limitFiles are the files a group's limits are written into (cgroup v1
// and v2), read back from the groups of the run whose process is pid.
var limitFiles = []string{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.max", "memory.swap.max",
	"pids.max", "cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.max"}

// groupLimits lists "controller dir/file=value" for every limit file of
// the run's groups.
func groupLimits(pid int) []string {
	var got []string
	for _, dir := range cgroupsOf(pid) {
		for _, f := range limitFiles {
			if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
				hier := filepath.Base(filepath.Dir(filepath.Dir(dir)))
				got = append(got, hier+"/"+f+"="+strings.TrimSpace(string(b)))
			}
		}
	}
	slices.Sort(got)
	return got
}

// startLimited starts a run that prints whether it was replayed and then
// sleeps as "sleep ARG"; it returns once the sleeper runs.
func startLimited(t *testing.T, ws string, env []string, args []string, arg string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(pinfold, append(args, "sh", "-c", `echo ${PINFOLD_REPLAYED:-no}; exec sleep `+arg)...)
	cmd.Dir, cmd.WaitDelay = ws, 2*time.Second
	if env != nil {
		// Not always: an Env of its own would drop the PWD that exec
		// sets from Dir, which the record's key holds.
		cmd.Env = append(os.Environ(), env...)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	for end := time.Now().Add(5 * time.Second); len(sleepers(arg)) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%v: the sleeper did not start", args)
		}
	}
	waitHandoff(t, cmd.Process.Pid)
	return cmd, strings.TrimSpace(line)
}

// TestLimitsReplayed: a run with memory, pids and CPU limits is replayed
// from its launch record, and the replay makes the same groups with the
// same values as the Go side, runs the command in them (the memory hog
// killed, the forks over the pids limit refused, with pinfold's messages
// and statuses), and leaves none behind.
func TestLimitsReplayed(t *testing.T) {
	needCgroups(t)
	st := needLaunchCache(t)
	ws := freshWorkspace(t)
	flags := []string{"run", "--access", "ro", "--memory", "16m", "--pids", "8", "--cpus", "0.5", "--"}
	prime(t, st, ws, append(flags, "true")...)

	// The groups a replay makes hold what the Go side's hold, and the
	// command is in them.
	var want []string
	for _, side := range []string{"go", "replay"} {
		var env []string
		if side == "go" {
			env = []string{"PINFOLD_NO_LAUNCH_CACHE=1"}
		}
		arg := map[string]string{"go": "31.61", "replay": "31.62"}[side]
		cmd, line := startLimited(t, ws, env, flags, arg)
		if replayed := line == "1"; replayed != (side == "replay") {
			t.Fatalf("%s: printed %q", side, line)
		}
		pid := cmd.Process.Pid
		groups := cgroupsOf(pid)
		if len(groups) == 0 {
			t.Fatalf("%s: no cgroups", side)
		}
		sl := strconv.Itoa(sleepers(arg)[0])
		for _, g := range groups {
			procs, _ := os.ReadFile(filepath.Join(g, "cgroup.procs"))
			if !slices.Contains(strings.Fields(string(procs)), sl) {
				t.Errorf("%s: the command (%s) is not in %s: %q", side, sl, g, procs)
			}
		}
		got := groupLimits(pid)
		if side == "go" {
			want = got
		} else if !slices.Equal(got, want) {
			t.Errorf("the replay's groups hold\n%v\nthe Go side's\n%v", got, want)
		}
		waitNoZombies(t, side, pid)
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err == nil || cmd.ProcessState.ExitCode() != 143 {
			t.Errorf("%s: SIGTERM: %v", side, err)
		}
		if left := cgroupsOf(pid); len(left) != 0 {
			t.Errorf("%s: cgroups left: %v", side, left)
		}
	}
	if len(want) < 4 {
		t.Errorf("the Go side's groups hold only %v", want)
	}

	const hog = `x=$(head -c 100000000 /dev/zero | tr '\0' a)`
	for _, c := range []struct {
		name, script string
		code         int
		msgs         string
	}{
		{"memory", hog + "; echo survived", 137, "pinfold: killed: out of memory (limit 16MiB)\n"},
		{"pids", "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 5 & done; wait", 2, "pinfold: limit hit: process limit, fork refused (limit 8)\n"},
	} {
		cmd := exec.Command(pinfold, append(flags, "sh", "-c", `echo ${PINFOLD_REPLAYED:-no}; `+c.script)...)
		cmd.Dir, cmd.WaitDelay = ws, 2*time.Second
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		cmd.Run()
		var msgs strings.Builder
		for _, l := range strings.SplitAfter(errb.String(), "\n") {
			if strings.HasPrefix(l, "pinfold: ") {
				msgs.WriteString(l)
			}
		}
		if out.String() != "1\n" || cmd.ProcessState.ExitCode() != c.code || msgs.String() != c.msgs {
			t.Errorf("%s: output %q, status %d, messages %q (stderr %q); want a replay, %d, %q",
				c.name, out.String(), cmd.ProcessState.ExitCode(), msgs.String(), errb.String(), c.code, c.msgs)
		}
		if left := cgroupsOf(cmd.Process.Pid); len(left) != 0 {
			t.Errorf("%s: cgroups left: %v", c.name, left)
		}
	}

	// A replay's waiter killed with SIGKILL leaves its groups, named
	// after it, to pinfold clean (which removes the records too: last).
	cmd, line := startLimited(t, ws, nil, flags, "31.63")
	if line != "1" {
		t.Fatalf("kill -9: not replayed: %q", line)
	}
	groups := cgroupsOf(cmd.Process.Pid)
	cmd.Process.Kill()
	cmd.Wait()
	if len(groups) == 0 {
		t.Fatal("kill -9: no cgroups")
	}
	for end := time.Now().Add(5 * time.Second); len(sleepers("31.63")) > 0 && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	if _, errs, code := pf(t, ws, "clean"); code != 0 {
		t.Errorf("pinfold clean: %d %s", code, errs)
	}
	if left := cgroupsOf(cmd.Process.Pid); len(left) != 0 {
		t.Errorf("pinfold clean left a killed replay's groups: %v", left)
	}
}

// editRecord replaces the data of the record's entries of tag with what
// edit returns.
func editRecord(t *testing.T, path string, tag uint16, edit func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 16 {
		t.Fatalf("reading %s: %v", path, err)
	}
	out := append([]byte(nil), b[:16]...)
	found := false
	for p := b[16:]; len(p) >= 8; {
		tg := binary.NativeEndian.Uint16(p)
		n := int(binary.NativeEndian.Uint32(p[4:]))
		data := p[8 : 8+n]
		p = p[min(len(p), 8+(n+7)&^7):]
		if tg == tag {
			data, found = edit(append([]byte(nil), data...)), true
		}
		out = binary.NativeEndian.AppendUint16(out, tg)
		out = append(out, 0, 0)
		out = binary.NativeEndian.AppendUint32(out, uint32(len(data)))
		out = append(out, data...)
		for len(out)%8 != 0 {
			out = append(out, 0)
		}
	}
	if !found {
		t.Fatalf("%s has no record of tag %d", path, tag)
	}
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestLimitsReplayFailsClosed: a replay that cannot set a limit does not
// run the command: it removes the groups it made and leaves the run to
// the Go side, which runs it with its limits.
func TestLimitsReplayFailsClosed(t *testing.T) {
	needCgroups(t)
	st := needLaunchCache(t)
	ws := freshWorkspace(t)
	flags := []string{"run", "--access", "ro", "--memory", "16m", "--pids", "8", "--"}
	prime(t, st, ws, append(flags, "true")...)
	recs, _ := filepath.Glob(filepath.Join(st, "launch", "*"))
	const rCgroup = 11
	editRecord(t, recs[0], rCgroup, func(d []byte) []byte {
		// pids.max takes no such value: the write fails.
		e := bytes.Replace(d, []byte("pids.max\x008\x00"), []byte("pids.max\x00eight\x00"), 1)
		if bytes.Equal(e, d) {
			t.Fatalf("the record does not write pids.max: %q", d)
		}
		return e
	})
	var before []string
	for _, p := range []string{"memory", "pids"} {
		m, _ := filepath.Glob("/sys/fs/cgroup/" + p + "/pinfold/*")
		before = append(before, m...)
	}
	out, errs, code := pf(t, ws, append(flags, "sh", "-c", `echo ${PINFOLD_REPLAYED:-no}; for i in 1 2 3 4 5 6 7 8 9 10; do sleep 5 & done; wait`)...)
	if out != "no\n" || code != 2 || !strings.Contains(errs, "pinfold: limit hit: process limit, fork refused (limit 8)\n") {
		t.Errorf("after a failed replay: output %q, status %d, stderr %q; want the Go side's run, limited", out, code, errs)
	}
	// The replay's groups were named after the process, which is gone.
	for _, p := range []string{"memory", "pids"} {
		m, _ := filepath.Glob("/sys/fs/cgroup/" + p + "/pinfold/*-*-1")
		for _, d := range m {
			if !slices.Contains(before, d) {
				if f := strings.SplitN(filepath.Base(d), "-", 2); len(f) == 2 && f[0] != "" {
					if _, err := os.Stat("/proc/" + f[0]); err != nil {
						t.Errorf("a group of the failed replay is left: %s", d)
					}
				}
			}
		}
	}
}

// TestLimitsFromConfigReplayed: limits from pinfold.yaml are replayed as
// the flags' are, and a changed pinfold.yaml (a dependency of the record)
// is never replayed with the old limits.
func TestLimitsFromConfigReplayed(t *testing.T) {
	needCgroups(t)
	st := needLaunchCache(t)
	ws := t.TempDir()
	cfg := filepath.Join(ws, "pinfold.yaml")
	if err := os.WriteFile(cfg, []byte("version: 1\nlimits:\n  pids: 8\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	settle()
	args := []string{"run", "--access", "ro", "--"}
	prime(t, st, ws, append(args, "true")...)
	bomb := `echo ${PINFOLD_REPLAYED:-no}; for i in $(seq 20); do sleep 5 & done; wait`
	out, errs, code := pf(t, ws, append(args, "sh", "-c", bomb)...)
	if out != "1\n" || code != 2 || !strings.Contains(errs, "pinfold: limit hit: process limit, fork refused (limit 8)\n") {
		t.Errorf("the config's limit, replayed: output %q, status %d, stderr %q", out, code, errs)
	}
	if err := os.WriteFile(cfg, []byte("version: 1\nlimits:\n  pids: 12\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errs, code = pf(t, ws, append(args, "sh", "-c", bomb)...)
	if out != "no\n" || code != 2 || !strings.Contains(errs, "pinfold: limit hit: process limit, fork refused (limit 12)\n") {
		t.Errorf("after the config changed: output %q, status %d, stderr %q; want the Go side with the new limit", out, code, errs)
	}
}
