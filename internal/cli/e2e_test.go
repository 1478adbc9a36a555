package cli_test

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pinfold/pinfold/internal/nettest"
	"golang.org/x/sys/unix"
)

// pinfold is the binary under test, built once by TestMain.
var pinfold string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pinfold-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Chmod(dir, 0o755)
	// Built as scripts/build.sh does: entered through the launch cache.
	if pinfold, err = nettest.BuildPinfold(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// An app's first mounted run unpacks it into the store in the
	// background, which would still be writing when a test removes its
	// store: tests keep apps mounted unless they set PINFOLD_APP_MOUNT
	// themselves (TestAppMountedRun checks the default, and waits).
	os.Setenv("PINFOLD_APP_MOUNT", "always")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// pf runs pinfold in dir and returns stdout, stderr and the exit status.
func pf(t *testing.T, dir string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(pinfold, args...)
	cmd.Dir = dir
	cmd.WaitDelay = 2 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running pinfold: %v", err)
	}
	return out.String(), errb.String(), code
}

func TestExitCodes(t *testing.T) {
	ws := t.TempDir()
	for _, c := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"run", "--", "true"}, 0, ""},
		{[]string{"run", "--", "sh", "-c", "exit 3"}, 3, ""},
		{[]string{"run", "sh", "-c", "kill -INT $$"}, 130, ""},
		{[]string{"run", "--", "no-such-command"}, 127, "PF150"},
		{[]string{"run", "--", "/etc/hostname"}, 126, "PF151"},
		{[]string{"run", "--no-such-flag", "--", "true"}, 125, "PF101"},
		{[]string{"run", "--memory", "lots", "--", "true"}, 125, "PF102"},
		{[]string{"run", "--pids", "1", "--", "true"}, 125, "at least 2 processes"},
		{[]string{"run", "--cpus", "0.001", "--", "true"}, 125, "at least 0.01 CPUs"},
		{[]string{"run", "--access", "ro", "--apply", "--", "true"}, 125, "this run has none"},
		{[]string{"run", "--network", "none", "--allow", "example.org", "--", "true"}, 125, "has none to filter"},
		{[]string{"run", "-e", "BAD NAME=1", "--", "true"}, 125, "PF102"},
		{[]string{"run", "--base", "dir:/no/such/dir", "--", "true"}, 125, "PF120"},
		{[]string{"run", "--workspace", "/usr", "--", "true"}, 125, "PF110"},
		{[]string{"run", "--timeout", "0.2", "--", "sleep", "10"}, 124, "killed: timeout"},
		{[]string{"run"}, 125, "PF101"},
		{[]string{"frobnicate"}, 125, "PF101"},
	} {
		_, errs, code := pf(t, ws, c.args...)
		if code != c.code || !strings.Contains(errs, c.err) {
			t.Errorf("%v: status %d stderr %q, want %d and %q", c.args, code, errs, c.code, c.err)
		}
	}
}

func TestFlagsReachTheSandbox(t *testing.T) {
	ws := t.TempDir()
	sub := filepath.Join(ws, "sub")
	os.Mkdir(sub, 0o755)
	t.Setenv("PINFOLD_HOST_VAR", "from-host")
	t.Setenv("PINFOLD_NOT_PASSED", "secret")
	out, errs, code := pf(t, sub, "run", "-e", "A=1", "--env", "PINFOLD_HOST_VAR", "--hostname", "box", "--",
		"sh", "-c", `echo "$A $PINFOLD_HOST_VAR $PINFOLD_NOT_PASSED"; hostname; pwd; cat /proc/self/uid_map | wc -l`)
	if code != 0 || out != "1 from-host \nbox\n"+sub+"\n1\n" {
		t.Errorf("got %d %q %q", code, out, errs)
	}
	out, _, _ = pf(t, sub, "run", "--workspace", ws, "-w", "/tmp", "--", "pwd")
	if out != "/tmp\n" {
		t.Errorf("--workdir: %q", out)
	}
}

func TestJSONResult(t *testing.T) {
	ws := t.TempDir()
	out, _, code := pf(t, ws, "run", "--json", "--tmp-size", "4m", "--", "sh", "-c", "echo hi; head -c 9000000 /dev/zero > /tmp/f")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var r struct {
		Status    int      `json:"status"`
		Reason    string   `json:"reason"`
		LimitsHit []string `json:"limits_hit"`
		Duration  float64  `json:"duration_ms"`
		Limits    struct {
			TmpSize int64 `json:"tmp_size"`
		} `json:"limits"`
	}
	if len(lines) != 2 || lines[0] != "hi" {
		t.Fatalf("output %q", out)
	}
	if err := json.Unmarshal([]byte(lines[1]), &r); err != nil {
		t.Fatal(err)
	}
	if code != 1 || r.Status != 1 || r.Reason != "exited" || len(r.LimitsHit) != 1 || r.LimitsHit[0] != "tmp" ||
		r.Limits.TmpSize != 4<<20 || r.Duration <= 0 {
		t.Errorf("got %d %+v", code, r)
	}
}

// startMarked starts pinfold running a marked long sleep and waits until it runs.
func startMarked(t *testing.T, ws string, extra ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	// rw: a plain run hands off to the waiter (a changeset keeps Go to the end).
	args := append([]string{"run", "--access", "rw"}, extra...)
	args = append(args, "--", "sh", "-c", "trap 'echo got-term; exit 42' TERM; echo started; while :; do sleep 0.05; done", "pinfold-cli-test-marker")
	cmd := exec.Command(pinfold, args...)
	cmd.Dir = ws
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// A leaked sandbox would hold the pipe open: fail instead of hanging.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	for end := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), "started"); {
		if time.Now().After(end) {
			cmd.Process.Kill()
			t.Fatalf("sandbox did not start: %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cmd, &out
}

func marked() []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(b, []byte("pinfold-cli-test-marker")) && !bytes.HasPrefix(b, []byte(pinfold)) {
			pid, _ := strconv.Atoi(e.Name())
			pids = append(pids, pid)
		}
	}
	return pids
}

func waitGone(t *testing.T, d time.Duration) {
	t.Helper()
	for start := time.Now(); len(marked()) > 0; {
		if time.Since(start) > d {
			t.Fatalf("sandbox processes survived: %v", marked())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitHandoff waits until pinfold has replaced itself with the waiter: a
// signal sent earlier ends the sandbox at once (see docs/cli.md).
func waitHandoff(t *testing.T, pid int) {
	t.Helper()
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		argv, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if bytes.HasPrefix(argv, []byte("pinfold-wait\x00")) {
			return
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("pinfold did not hand off: %q", argv)
		}
	}
}

func TestSignalsReachTheCommand(t *testing.T) {
	ws := t.TempDir()
	cmd, out := startMarked(t, ws)
	waitHandoff(t, cmd.Process.Pid)
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 42 || !strings.Contains(out.String(), "got-term") {
		t.Errorf("SIGTERM: %v %q", err, out.String())
	}
	waitGone(t, 20*time.Second)
}

func pinfoldCgroups() []string {
	var found []string
	for _, ctrl := range []string{"memory", "pids", "cpu", "unified"} {
		ents, _ := os.ReadDir("/sys/fs/cgroup/" + ctrl + "/pinfold")
		for _, e := range ents {
			if e.IsDir() {
				found = append(found, ctrl+"/"+e.Name())
			}
		}
	}
	if ents, err := os.ReadDir("/sys/fs/cgroup/pinfold"); err == nil {
		for _, e := range ents {
			if e.IsDir() {
				found = append(found, e.Name())
			}
		}
	}
	return found
}

func TestKill9LeavesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("limits need root here")
	}
	ws := t.TempDir()
	// A store of its own: the mounts compared are this run's, not those
	// other test packages make and remove meanwhile.
	store := storeDir(t)
	mountsBefore := hostMounts(store, ws)
	cmd, _ := startMarked(t, ws, "--memory", "64m", "--pids", "64")
	pid := cmd.Process.Pid
	if len(marked()) == 0 {
		t.Fatal("no sandbox processes found")
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	waitGone(t, 20*time.Second)
	if mountsAfter := hostMounts(store, ws); mountsBefore != mountsAfter {
		t.Errorf("host mounts changed:\n%s\nvs\n%s", mountsBefore, mountsAfter)
	}
	prefix := strconv.Itoa(pid) + "-"
	stale := 0
	for _, g := range pinfoldCgroups() {
		if strings.Contains(g, prefix) {
			stale++
		}
	}
	if stale == 0 {
		// Another pinfold clean (a concurrent test package's, such as
		// internal/conformance's) may have removed them already.
		t.Log("the killed run's cgroups were gone before this clean")
	}
	// What counts is that none is left after this one.
	out, errs, code := pf(t, ws, "clean")
	if code != 0 {
		t.Errorf("clean: %d %q %q", code, out, errs)
	}
	for _, g := range pinfoldCgroups() {
		if strings.Contains(g, prefix) {
			t.Errorf("cgroup %s left after clean", g)
		}
	}
	// A run that ends normally leaves no cgroup either. Only this run's
	// are looked at: other test packages run, and kill, pinfolds of
	// their own meanwhile, whose groups wait for a clean.
	run := exec.Command(pinfold, "run", "--memory", "64m", "--", "true")
	run.Dir = ws
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("run: %v %s", err, out)
	}
	var left []string
	for _, g := range pinfoldCgroups() {
		if strings.HasPrefix(path.Base(g), strconv.Itoa(run.Process.Pid)+"-") {
			left = append(left, g)
		}
	}
	if len(left) != 0 {
		t.Errorf("cgroups left after a normal run: %v", left)
	}
}

// hostMounts is the lines of the host's mount table that mention one of
// dirs (a test's own store and workspace): the rest changes as other test
// packages, running at the same time, mount and unmount their own.
func hostMounts(dirs ...string) string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var keep []string
	for _, line := range strings.Split(string(b), "\n") {
		for _, d := range dirs {
			if strings.Contains(line, d) {
				keep = append(keep, line)
				break
			}
		}
	}
	return strings.Join(keep, "\n")
}

func TestTerminal(t *testing.T) {
	ws := t.TempDir()
	master, slave := openPTY(t)
	defer master.Close()
	unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 33, Col: 101})
	cmd := exec.Command(pinfold, "run", "-it", "--", "sh", "-c", "tty; stty size; echo ready; while read line; do s=$(stty size); [ \"$s\" = '44 120' ] && break; done; echo $s; echo got $line; exit 5")
	cmd.Dir = ws
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var out bytes.Buffer
	done := make(chan struct{})
	go func() { io.Copy(&out, master); close(done) }()
	for end := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), "ready"); {
		if time.Now().After(end) {
			t.Fatalf("no prompt: %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Resizing the outer terminal reaches the command's terminal.
	// The new size reaches it through pinfold's SIGWINCH, in its own time:
	// a line is typed until the command sees it (it exits then).
	unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 44, Col: 120})
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var err error
typing:
	for end := time.Now().Add(20 * time.Second); ; {
		master.Write([]byte("typed\r"))
		select {
		case err = <-exited:
			break typing
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(end) {
			cmd.Process.Kill()
			t.Fatalf("the new size did not reach the command: %q", out.String())
		}
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 5 {
		t.Errorf("exit: %v", err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	got := strings.ReplaceAll(out.String(), "\r", "")
	for _, w := range []string{"/dev/pts/0\n", "33 101\n", "44 120\n", "got typed\n"} {
		if !strings.Contains(got, w) {
			t.Errorf("terminal output lacks %q: %q", w, got)
		}
	}
}

// TestTerminalInputEnds: a terminal run whose input is not a terminal (a
// file, a pipe) passes the input's end on, as Ctrl-D would: a command
// reading it ends instead of waiting forever.
func TestTerminalInputEnds(t *testing.T) {
	ws := t.TempDir()
	cmd := exec.Command(pinfold, "run", "-it", "--timeout", "20", "--", "sh", "-c", `read x; echo "got [$x] $?"; read y; echo "then $?"`)
	cmd.Dir, cmd.Stdin = ws, strings.NewReader("one\n")
	out, err := cmd.CombinedOutput()
	got := strings.ReplaceAll(string(out), "\r", "")
	if err != nil || !strings.Contains(got, "got [one] 0\n") || !strings.Contains(got, "then 1\n") {
		t.Errorf("piped input to -it: %v %q", err, got)
	}
	// A last line without its newline is handed over, then the end.
	cmd = exec.Command(pinfold, "run", "-it", "--timeout", "20", "--", "sh", "-c", `cat; echo " end"`)
	cmd.Dir, cmd.Stdin = ws, strings.NewReader("abc")
	out, err = cmd.CombinedOutput()
	if got := strings.ReplaceAll(string(out), "\r", ""); err != nil || !strings.Contains(got, "abc end\n") {
		t.Errorf("input without a final newline: %v %q", err, got)
	}
}

func TestUnprivilegedUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switching to another user needs root")
	}
	ws := t.TempDir()
	os.Chmod(filepath.Dir(ws), 0o755)
	if err := os.Chown(ws, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, int) {
		cmd := exec.Command(pinfold, args...)
		cmd.Dir = ws
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return string(out), code
	}
	out, code := run("run", "--access", "rw", "--", "sh", "-c", "id -u; touch made; cat /proc/self/uid_map")
	if code != 0 || !strings.HasPrefix(out, "65534\n") {
		t.Fatalf("unprivileged run: %d %q", code, out)
	}
	out, code = run("run", "--access", "rw", "--user", "root", "--", "sh", "-c", "id -u; touch made-as-root")
	if code != 0 || out != "0\n" {
		t.Fatalf("--user root: %d %q", code, out)
	}
	for _, f := range []string{"made", "made-as-root"} {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(ws, f), &st); err != nil || st.Uid != 65534 {
			t.Errorf("%s: %v uid %d, want 65534", f, err, st.Uid)
		}
	}
	// Limits need cgroups the user cannot create here: a clear error.
	out, code = run("run", "--memory", "64m", "--", "true")
	if code != 125 || !strings.Contains(out, "PF130") {
		t.Errorf("unprivileged --memory: %d %q", code, out)
	}
}

func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}

func TestHandoffToWaiter(t *testing.T) {
	ws := t.TempDir()
	cmd, out := startMarked(t, ws)
	pid := strconv.Itoa(cmd.Process.Pid)
	// A plain run replaces pinfold with a one-thread waiter of a few pages.
	waitHandoff(t, cmd.Process.Pid)
	status, _ := os.ReadFile("/proc/" + pid + "/status")
	for _, l := range strings.Split(string(status), "\n") {
		f := strings.Fields(l)
		if len(f) > 1 && f[0] == "Threads:" && f[1] != "1" {
			t.Errorf("waiter has %s threads", f[1])
		}
		if len(f) > 1 && f[0] == "VmRSS:" {
			if kb, _ := strconv.Atoi(f[1]); kb > 1024 {
				t.Errorf("waiter uses %d kB", kb)
			}
		}
	}
	// The waiter forwards signals...
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Errorf("SIGINT through the waiter: %v %q", err, out.String())
	}
	waitGone(t, 20*time.Second)
	// ...and its death takes the sandbox with it.
	cmd, _ = startMarked(t, ws)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	waitGone(t, 20*time.Second)
}

func TestHostileTarball(t *testing.T) {
	ws := t.TempDir()
	outside := filepath.Join(t.TempDir(), "escaped")
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "link", Typeflag: tar.TypeSymlink, Linkname: filepath.Dir(outside), Mode: 0o777})
	tw.WriteHeader(&tar.Header{Name: "link/escaped", Typeflag: tar.TypeReg, Mode: 0o644, Size: 5})
	tw.Write([]byte("pwned"))
	tw.Close()
	archive := filepath.Join(t.TempDir(), "evil.tar")
	os.WriteFile(archive, buf.Bytes(), 0o644)
	store := storeDir(t)
	_, errs, code := pf(t, ws, "run", "--base", "tar:"+archive, "--", "true")
	if code != 125 || !strings.Contains(errs, "PF121") || !strings.Contains(errs, "symlink") {
		t.Errorf("hostile tarball: %d %q", code, errs)
	}
	if _, err := os.Stat(outside); err == nil {
		t.Fatal("the archive wrote outside the store")
	}
	if ents, _ := os.ReadDir(filepath.Join(store, "bases", "tar")); len(ents) != 0 {
		t.Errorf("a hostile archive left a base: %v", ents)
	}
}

// waitServer waits for pinfold serve's socket to show. The wait is long:
// a loaded machine may take seconds to start it, and a test that looked
// too early failed for nothing.
func waitServer(t *testing.T, sock string) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("pinfold serve did not make its socket %s", sock)
		}
	}
}
