package cgroup

// Tests on the host's real cgroups. They need root and skip without it;
// CI runs them as root. Every group is named with testPrefix, and
// TestMain checks that none is left behind.

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hostSystem detects the host's cgroups and requires support for l.
func hostSystem(t *testing.T, l Limits) *System {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("creating cgroups needs root")
	}
	s, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Supports(l); err != nil {
		t.Fatalf("Supports(%+v) = %v", l, err)
	}
	return s
}

// newHostGroup creates a test group and removes it when the test ends.
func newHostGroup(t *testing.T, s *System, suffix string, l Limits) *Group {
	t.Helper()
	g, err := s.New(testPrefix+suffix, l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Kill(); err != nil {
			t.Error(err)
		}
		if err := g.Remove(); err != nil {
			t.Error(err)
		}
	})
	return g
}

// startJoined runs script with sh inside g. The shell first waits for a
// line on stdin, sent once Join has moved it, so that the script and
// everything it starts run in the group.
func startJoined(t *testing.T, g *Group, script string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sh", "-c", "read x; "+script)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	if err := g.Join(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(in, "go\n"); err != nil {
		t.Fatal(err)
	}
	in.Close()
	return cmd
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// procsOf lists the processes in every directory of g.
func procsOf(t *testing.T, g *Group) []int {
	t.Helper()
	var pids []int
	for _, f := range g.ProcsFiles() {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		eachPid(b, func(p int) { pids = append(pids, p) })
	}
	return pids
}

// TestHostGroupLimitsAndJoin creates a group with all three limits,
// checks the values in the controllers' files, joins a real process,
// sees it in /proc/<pid>/cgroup, kills it through the group and removes
// the group.
func TestHostGroupLimitsAndJoin(t *testing.T) {
	l := Limits{MemoryBytes: 32 << 20, Pids: 16, CPUs: 0.5}
	s := hostSystem(t, l)
	t.Logf("cgroup version %s", s.Version())
	g := newHostGroup(t, s, "limits", l)

	want := map[string]string{g.ctrl[ctrlPids] + "/pids.max": "16"}
	if dir := g.ctrl[ctrlMemory]; dir == g.v2 {
		want[dir+"/memory.max"] = "33554432"
		if _, err := os.Stat(dir + "/memory.swap.max"); err == nil {
			want[dir+"/memory.swap.max"] = "0"
		}
	} else {
		want[dir+"/memory.limit_in_bytes"] = "33554432"
		if _, err := os.Stat(dir + "/memory.memsw.limit_in_bytes"); err == nil {
			want[dir+"/memory.memsw.limit_in_bytes"] = "33554432"
		}
	}
	if dir := g.ctrl[ctrlCPU]; dir == g.v2 {
		want[dir+"/cpu.max"] = "50000 100000"
	} else {
		want[dir+"/cpu.cfs_quota_us"] = "50000"
		want[dir+"/cpu.cfs_period_us"] = "100000"
	}
	for path, w := range want {
		if got := readTrim(t, path); got != w {
			t.Errorf("%s = %q, want %q", path, got, w)
		}
	}

	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	if err := g.Join(pid); err != nil {
		t.Fatal(err)
	}
	if got := procsOf(t, g); len(got) != len(g.ProcsFiles()) || slices.ContainsFunc(got, func(p int) bool { return p != pid }) {
		t.Errorf("processes in the group = %v, want %d in each of %q", got, pid, g.ProcsFiles())
	}
	// /proc/<pid>/cgroup has "id:controllers:/path" lines, v2's with no
	// controllers; each limited controller's line names the group.
	own := readTrim(t, "/proc/"+strconv.Itoa(pid)+"/cgroup")
	for c := range numCtrl {
		found := false
		for _, line := range strings.Split(own, "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 || !strings.HasSuffix(parts[2], "/"+parentName+"/"+g.Name()) {
				continue
			}
			if g.ctrl[c] == g.v2 && parts[1] == "" || slices.Contains(strings.Split(parts[1], ","), c.String()) {
				found = true
			}
		}
		if !found {
			t.Errorf("/proc/%d/cgroup has no %s line for the group:\n%s", pid, c, own)
		}
	}

	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("sleep ended with %v, want killed", err)
	}
	if got := procsOf(t, g); len(got) != 0 {
		t.Errorf("processes left after Kill: %v", got)
	}
	dirs := g.ProcsFiles()
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	for _, f := range dirs {
		if _, err := os.Stat(strings.TrimSuffix(f, "/cgroup.procs")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("group directory still there after Remove: %v", err)
		}
	}
	if err := g.Remove(); err != nil {
		t.Errorf("second Remove() = %v, want nil", err)
	}
}

// TestHostSelfJoin checks the ProcsFiles contract: a process that writes
// "0" into each file is in the group.
func TestHostSelfJoin(t *testing.T) {
	l := Limits{Pids: 8, MemoryBytes: 64 << 20}
	s := hostSystem(t, l)
	g := newHostGroup(t, s, "self", l)
	args := append([]string{"-c", `for f; do echo 0 > "$f" || exit 1; done; exec cat /proc/self/cgroup`, "sh"}, g.ProcsFiles()...)
	out, err := exec.Command("sh", args...).Output()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(out), "/"+parentName+"/"+g.Name()+"\n"); n != len(g.ProcsFiles()) {
		t.Errorf("/proc/self/cgroup names the group %d times, want %d:\n%s", n, len(g.ProcsFiles()), out)
	}
}

// TestHostOOMKill runs a memory hog in a 32 MiB group: tail keeps a
// 200 MB line without newline in memory until the OOM killer stops it.
func TestHostOOMKill(t *testing.T) {
	l := Limits{MemoryBytes: 32 << 20}
	s := hostSystem(t, l)
	g := newHostGroup(t, s, "oom", l)
	cmd := startJoined(t, g, "head -c 200000000 /dev/zero | tail")
	if err := cmd.Wait(); err == nil {
		t.Error("memory hog succeeded, want it killed")
	}
	st, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats %+v", st)
	if st.OOMKills < 1 {
		t.Errorf("OOMKills = %d, want >= 1", st.OOMKills)
	}
	if st.MemoryPeak < 16<<20 || st.MemoryPeak > l.MemoryBytes*11/10 {
		t.Errorf("MemoryPeak = %d, want between 16 MiB and the 32 MiB limit", st.MemoryPeak)
	}
}

// TestHostPidsLimit runs a shell that starts 50 background sleeps in a
// group limited to 8 processes: forks beyond the limit fail, the refusals
// are counted, and the host can still fork.
func TestHostPidsLimit(t *testing.T) {
	l := Limits{Pids: 8}
	s := hostSystem(t, l)
	g := newHostGroup(t, s, "pids", l)
	cmd := startJoined(t, g, "for i in $(seq 1 50); do sleep 5 & done; wait")
	deadline := time.Now().Add(20 * time.Second)
	var st Stats
	for time.Now().Before(deadline) {
		var err error
		if st, err = g.Stats(); err != nil {
			t.Fatal(err)
		}
		if st.PidsMaxHits > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st.PidsMaxHits < 1 {
		t.Fatalf("PidsMaxHits = %d, want >= 1", st.PidsMaxHits)
	}
	if n := len(procsOf(t, g)); n > 8 {
		t.Errorf("%d processes in the group, limit 8", n)
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if got := procsOf(t, g); len(got) != 0 {
		t.Errorf("processes left after Kill: %v", got)
	}
	if err := exec.Command("true").Run(); err != nil {
		t.Errorf("host cannot start a process after the test: %v", err)
	}
}

// TestHostCPUThrottle spins in a group allowed 0.2 CPUs until it is
// throttled. A fixed 0.6 s of spinning was not throttled on a machine
// loaded enough that the spinner got less than 0.2 CPUs anyway.
func TestHostCPUThrottle(t *testing.T) {
	l := Limits{CPUs: 0.2}
	s := hostSystem(t, l)
	g := newHostGroup(t, s, "cpu", l)
	cmd := startJoined(t, g, "exec timeout 30 sh -c 'while :; do :; done'")
	var st Stats
	for end := time.Now().Add(30 * time.Second); st.CPUThrottled < 1 && time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		var err error
		if st, err = g.Stats(); err != nil {
			t.Fatal(err)
		}
	}
	g.Kill()
	cmd.Wait()
	if st.CPUThrottled < 1 {
		t.Errorf("CPUThrottled = %d, want >= 1", st.CPUThrottled)
	}
}

// TestHostKillForking kills a group whose shell keeps forking sleeps
// until the process limit stops it.
func TestHostKillForking(t *testing.T) {
	l := Limits{Pids: 64}
	s := hostSystem(t, l)
	g := newHostGroup(t, s, "forking", l)
	cmd := startJoined(t, g, "while :; do sleep 30 & done")
	for end := time.Now().Add(20 * time.Second); len(procsOf(t, g)) < 2 && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	if len(procsOf(t, g)) < 2 {
		t.Fatal("the shell did not fork")
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if got := procsOf(t, g); len(got) != 0 {
		t.Errorf("processes left after Kill: %v", got)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
}

// TestHostClean removes a stale group, with its process, and keeps a
// live one. alive() reports every other group alive, so groups of other
// users of this host are not touched.
func TestHostClean(t *testing.T) {
	l := Limits{Pids: 4, MemoryBytes: 16 << 20}
	s := hostSystem(t, l)
	stale := newHostGroup(t, s, "stale", l)
	live := newHostGroup(t, s, "live", l)
	cmd := startJoined(t, stale, "exec sleep 30")
	removed, err := s.Clean(func(name string) bool { return name != stale.Name() })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{stale.Name()}) {
		t.Errorf("Clean() removed %q, want only %q", removed, stale.Name())
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("process of the stale group ended with %v, want killed", err)
	}
	for _, f := range stale.ProcsFiles() {
		if _, err := os.Stat(f); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("stale group still there: %v", err)
		}
	}
	for _, f := range live.ProcsFiles() {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("live group removed: %v", err)
		}
	}
}

// TestHostNewErrors checks refusals: a taken name leaves the existing
// group intact, bad names and limits create nothing, a dead process
// is refused.
func TestHostNewErrors(t *testing.T) {
	l := Limits{Pids: 4}
	s := hostSystem(t, l)
	g := newHostGroup(t, s, "dup", l)
	if _, err := s.New(g.Name(), Limits{Pids: 4, MemoryBytes: 8 << 20}); !errors.Is(err, fs.ErrExist) {
		t.Errorf("New() of a taken name = %v, want ErrExist", err)
	}
	for _, f := range g.ProcsFiles() {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("existing group damaged: %v", err)
		}
	}
	for _, name := range []string{"", "..", "a/b", testPrefix + "bad name"} {
		if _, err := s.New(name, l); !errors.Is(err, ErrInvalid) {
			t.Errorf("New(%q) = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := s.New(testPrefix+"small", Limits{MemoryBytes: 1 << 20}); !errors.Is(err, ErrInvalid) {
		t.Errorf("New() with 1 MiB = %v, want ErrInvalid", err)
	}
	// Above the largest pid_max, so no process can have it.
	if err := g.Join(1 << 30); err == nil {
		t.Error("Join() of a missing process = nil, want error")
	}
}

// BenchmarkHostLifecycle measures what a sandbox start and end pay:
// Detect, New with all three limits, Join of a process, and Remove. One
// helper process moves from each iteration's group to the next.
func BenchmarkHostLifecycle(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("creating cgroups needs root")
	}
	l := Limits{MemoryBytes: 32 << 20, Pids: 16, CPUs: 0.5}
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var prev *Group
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
		if prev != nil {
			prev.Remove()
		}
	}()
	for i := 0; b.Loop(); i++ {
		s, err := Detect()
		if err != nil {
			b.Fatal(err)
		}
		g, err := s.New(testPrefix+"bench-"+strconv.Itoa(i), l)
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Join(cmd.Process.Pid); err != nil {
			b.Fatal(err)
		}
		if prev != nil {
			if err := prev.Remove(); err != nil {
				b.Fatal(err)
			}
		}
		prev = g
	}
}
