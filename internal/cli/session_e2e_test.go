package cli_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/pinfold/pinfold/internal/conformance"
)

// sessionRecord is what session status --json prints.
type sessionRecord struct {
	ID        string `json:"id"`
	State     string `json:"state"`
	Pid       int    `json:"pid"`
	Changeset string `json:"changeset"`
	Reason    string `json:"reason"`
	Added     int    `json:"added"`
}

// startSession starts a session in ws with args and stops it at the end.
func startSession(t *testing.T, ws string, args ...string) sessionRecord {
	t.Helper()
	out, errs, code := pf(t, ws, append([]string{"session", "start", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("session start: %d %s", code, errs)
	}
	var r sessionRecord
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.State != "running" || r.Pid == 0 {
		t.Fatalf("session start printed %q (%v)", out, err)
	}
	t.Cleanup(func() {
		pf(t, ws, "session", "stop", "--time", "2", r.ID)
		if p, err := os.FindProcess(r.Pid); err == nil && syscall.Kill(r.Pid, 0) == nil {
			p.Kill()
		}
	})
	return r
}

func sessionStatus(t *testing.T, ws, id string) sessionRecord {
	t.Helper()
	out, errs, code := pf(t, ws, "session", "status", "--json", id)
	var r sessionRecord
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("session status: %d %q %s", code, out, errs)
	}
	return r
}

// cgroupsOf lists the cgroups named after a supervisor's pid.
func cgroupsOf(pid int) []string {
	var found []string
	for _, pat := range []string{"/sys/fs/cgroup/*/pinfold/", "/sys/fs/cgroup/*/*/pinfold/", "/sys/fs/cgroup/pinfold/", "/sys/fs/cgroup/*/*/*/pinfold/"} {
		m, _ := filepath.Glob(pat + strconv.Itoa(pid) + "-*")
		found = append(found, m...)
	}
	return found
}

func mountsMentioning(s string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var found []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			found = append(found, l)
		}
	}
	return found
}

func TestSessionLifecycle(t *testing.T) {
	store := storeDir(t)
	t.Cleanup(func() { waitTrashCleaners(store) })
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "old.txt"), []byte("old\n"), 0o644)
	var limits []string
	if os.Geteuid() == 0 {
		limits = []string{"--memory", "256m"} // a cgroup, to see it go
	}
	r := startSession(t, ws, append(limits, "--name", "life")...)
	if r.Changeset == "" {
		t.Fatal("the session has no changeset")
	}
	if os.Geteuid() == 0 && len(cgroupsOf(r.Pid)) == 0 {
		t.Error("no cgroup for the session's limits")
	}

	// Execs share /tmp, the home and background processes.
	out, errs, code := pf(t, ws, "exec", "life", "--", "sh", "-c",
		`echo out; echo err >&2; echo t > /tmp/t; echo h > "$HOME/h"; echo new > new.txt; echo changed > old.txt; `+
			`sleep 3141 >/dev/null 2>&1 & exit 3`)
	if code != 3 || out != "out\n" || errs != "err\n" {
		t.Fatalf("first exec: %d %q %q", code, out, errs)
	}
	out, errs, code = pf(t, ws, "exec", r.ID[:6], "sh", "-c", `cat /tmp/t "$HOME/h"; echo $HOME; pwd; for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; done | grep -c '^sleep 3141'`)
	if code != 0 || out != "t\nh\n/home/sandbox\n"+ws+"\n1\n" {
		t.Errorf("second exec: %d %q %q", code, out, errs)
	}
	if len(conformance.ProcessesWith("sleep 3141")) != 1 {
		t.Errorf("the background process is not running on the host: %v", conformance.ProcessesWith("sleep 3141"))
	}
	// stdin, exit statuses, a missing and a non-executable command.
	cmd := exec.Command(pinfold, "exec", "-i", "life", "--", "sh", "-c", "tr a-z A-Z; exit 5")
	cmd.Dir, cmd.Stdin = ws, strings.NewReader("piped\n")
	b, err := cmd.Output()
	if cmd.ProcessState.ExitCode() != 5 || string(b) != "PIPED\n" {
		t.Errorf("stdin: %v %q", err, b)
	}
	for _, c := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"exec", "life", "--", "no-such-command"}, 127, "PF150"},
		{[]string{"exec", "life", "--", "/etc/hostname"}, 126, "PF151"},
		{[]string{"exec", "life", "--", "sh", "-c", "kill -TERM $$"}, 143, ""},
		{[]string{"exec", "no-such-session", "--", "true"}, 125, "PF190"},
		{[]string{"exec", "life"}, 125, "PF101"},
	} {
		_, errs, code := pf(t, ws, c.args...)
		if code != c.code || !strings.Contains(errs, c.err) {
			t.Errorf("%v: %d %q, want %d %q", c.args, code, errs, c.code, c.err)
		}
	}
	// The changeset grows across execs and can be reviewed while the
	// session runs; it cannot be applied until it stops.
	out, _, code = pf(t, ws, "diff", r.Changeset)
	if code != 0 || !strings.Contains(out, "+new") || !strings.Contains(out, "+changed") {
		t.Errorf("diff during the session: %d %q", code, out)
	}
	pf(t, ws, "exec", "life", "--", "sh", "-c", "echo more > more.txt")
	out, _, _ = pf(t, ws, "diff", r.Changeset)
	if !strings.Contains(out, "+more") {
		t.Errorf("the changeset did not grow: %q", out)
	}
	if _, errs, code := pf(t, ws, "apply", r.Changeset); code != 125 || !strings.Contains(errs, "PF183") || !strings.Contains(errs, "session stop") {
		t.Errorf("apply while the session runs: %d %q", code, errs)
	}
	out, _, _ = pf(t, ws, "session", "ls")
	if !strings.Contains(out, r.ID) || !strings.Contains(out, "running") {
		t.Errorf("session ls: %q", out)
	}
	if out, _, _ := pf(t, ws, "changes"); !strings.Contains(out, "session life ("+r.ID+")") || strings.Contains(out, "__session-agent") {
		t.Errorf("changes names the agent, not the session: %q", out)
	}
	out, _, _ = pf(t, ws, "session", "logs", "life")
	if !strings.Contains(out, "exec sh (pid ") || !strings.Contains(out, "status 3 after") || strings.Contains(out, "sleep 3141") {
		t.Errorf("session logs: %q", out)
	}

	_, errs, code = pf(t, ws, "session", "stop", "life")
	if code != 0 || !strings.Contains(errs, "2 added, 1 modified") {
		t.Fatalf("stop: %d %q", code, errs)
	}
	// Nothing is left: processes, cgroups, mounts, the run directory.
	if p := conformance.ProcessesWith("sleep 3141"); len(p) > 0 {
		t.Errorf("left running: %v", p)
	}
	// The supervisor records the end, then exits: it may take a moment.
	p := conformance.ProcessesWith("__session-supervise " + r.ID)
	for end := time.Now().Add(20 * time.Second); len(p) > 0 && time.Now().Before(end); p = conformance.ProcessesWith("__session-supervise " + r.ID) {
		time.Sleep(20 * time.Millisecond)
	}
	if len(p) > 0 {
		t.Errorf("supervisor left running: %v", p)
	}
	if g := cgroupsOf(r.Pid); len(g) > 0 {
		t.Errorf("cgroups left: %v", g)
	}
	if m := mountsMentioning(r.ID); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	if _, err := os.Stat(filepath.Join(store, "sessions", r.ID, "run")); err == nil {
		t.Error("the run directory is left")
	}
	st := sessionStatus(t, ws, r.ID)
	if st.State != "stopped" || st.Reason != "stopped" {
		t.Errorf("status after stop: %+v", st)
	}
	if _, errs, code := pf(t, ws, "exec", r.ID, "true"); code != 125 || !strings.Contains(errs, "PF192") {
		t.Errorf("exec in a stopped session: %d %q", code, errs)
	}
	if _, errs, code := pf(t, ws, "apply", r.Changeset); code != 0 {
		t.Fatalf("apply after stop: %d %q", code, errs)
	}
	for name, want := range map[string]string{"new.txt": "new\n", "old.txt": "changed\n", "more.txt": "more\n"} {
		if b, _ := os.ReadFile(filepath.Join(ws, name)); string(b) != want {
			t.Errorf("%s applied as %q", name, b)
		}
	}
	// The name is free again; rm of it removes the ended session, not
	// the running one that now has it too.
	r2 := startSession(t, ws, "--name", "life")
	if _, errs, code := pf(t, ws, "session", "rm", "life"); code != 0 {
		t.Fatalf("rm of the ended session's name: %d %q", code, errs)
	}
	out, _, _ = pf(t, ws, "session", "ls", "--all")
	if strings.Contains(out, r.ID) || !strings.Contains(out, r2.ID) {
		t.Errorf("after rm life: %q", out)
	}
	if _, errs, code := pf(t, ws, "session", "rm", "life"); code != 125 || !strings.Contains(errs, "stop it first") {
		t.Errorf("rm of the running session: %d %q", code, errs)
	}
	pf(t, ws, "session", "stop", "life")
}

func TestSessionTerminal(t *testing.T) {
	t.Setenv("PINFOLD_STORE", t.TempDir())
	ws := t.TempDir()
	r := startSession(t, ws)
	cmd := exec.Command(pinfold, "exec", "-it", r.ID, "--", "sh", "-c", `tty; stty size; read x; echo "got $x"; exit 7`)
	cmd.Dir = ws
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 33, Cols: 101})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Type only once the command asks: input typed before exec puts the
	// terminal in raw mode is flushed with the mode change, as a real
	// terminal's would be.
	var out bytes.Buffer
	done := make(chan struct{})
	asked := make(chan struct{})
	go func() {
		b := make([]byte, 4096)
		for once := false; ; {
			n, err := f.Read(b)
			out.Write(b[:n])
			if !once && strings.Contains(out.String(), "33 101") {
				once = true
				close(asked)
			}
			if err != nil {
				break
			}
		}
		close(done)
	}()
	select {
	case <-asked:
	case <-time.After(20 * time.Second):
	}
	f.Write([]byte("typed\r"))
	werr := cmd.Wait()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	s := out.String()
	if cmd.ProcessState.ExitCode() != 7 || !strings.Contains(s, "/dev/pts/") || !strings.Contains(s, "33 101") || !strings.Contains(s, "got typed") {
		t.Errorf("exec -it: %v %q", werr, s)
	}
}

func TestSessionLostAndIdle(t *testing.T) {
	t.Setenv("PINFOLD_STORE", t.TempDir())
	ws := t.TempDir()
	var limits []string
	if os.Geteuid() == 0 {
		limits = []string{"--memory", "256m"}
	}
	r := startSession(t, ws, limits...)
	pf(t, ws, "exec", r.ID, "--", "sh", "-c", "sleep 2718 >/dev/null 2>&1 &")
	syscall.Kill(r.Pid, syscall.SIGKILL)
	// The kernel takes the sandbox down with its supervisor.
	deadline := time.Now().Add(10 * time.Second)
	for len(conformance.ProcessesWith("sleep 2718")) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if p := conformance.ProcessesWith("sleep 2718"); len(p) > 0 {
		t.Errorf("left running after the supervisor's kill -9: %v", p)
	}
	out, _, _ := pf(t, ws, "session", "ls", "--all", "--json")
	var list []sessionRecord
	json.Unmarshal([]byte(out), &list)
	if len(list) != 1 || list[0].State != "lost" {
		t.Errorf("session ls after kill -9: %q", out)
	}
	if g := cgroupsOf(r.Pid); len(g) > 0 {
		t.Errorf("cgroups left after a lost session: %v", g)
	}
	if m := mountsMentioning(r.ID); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}

	// An idle session stops itself.
	r2 := startSession(t, ws, "--idle-timeout", "1s")
	deadline = time.Now().Add(15 * time.Second)
	st := sessionStatus(t, ws, r2.ID)
	for st.State == "running" && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		st = sessionStatus(t, ws, r2.ID)
	}
	if st.State != "stopped" || st.Reason != "idle" {
		t.Errorf("idle session: %+v", st)
	}
}

// TestServeAndRemoteSessions runs pinfold serve and pinfold's session
// commands against it (PINFOLD_HOST: through pinfold-api's client).
func TestServeAndRemoteSessions(t *testing.T) {
	storeDir(t)
	ws := t.TempDir()
	if _, errs, code := pf(t, ws, "serve", "--listen", "127.0.0.1:0"); code != 125 || !strings.Contains(errs, "needs --tokens") {
		t.Errorf("serve on TCP without tokens: %d %q", code, errs)
	}
	// The operator's policy file is read only when nobody else may write it.
	policy := filepath.Join(t.TempDir(), "policy.json")
	os.WriteFile(policy, []byte(`{"networks":["none"]}`), 0o666)
	os.Chmod(policy, 0o666)
	if _, errs, code := pf(t, ws, "serve", "--socket", filepath.Join(t.TempDir(), "s.sock"), "--policy", policy); code != 125 || !strings.Contains(errs, "writable by others") {
		t.Errorf("serve with a policy file others may write: %d %q", code, errs)
	}
	sock := filepath.Join(t.TempDir(), "api.sock")
	srv := exec.Command(pinfold, "serve", "--socket", sock)
	srv.Dir = ws
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Signal(syscall.SIGTERM); srv.Wait() })
	waitServer(t, sock)
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Fatalf("the socket: %v %v", fi, err)
	}
	t.Setenv("PINFOLD_HOST", "unix://"+sock)
	out, errs, code := pf(t, ws, "session", "start", "--name", "remote", "--json")
	var r sessionRecord
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.State != "running" {
		t.Fatalf("remote start: %d %q %q", code, out, errs)
	}
	out, errs, code = pf(t, ws, "exec", "remote", "--", "sh", "-c", "echo via-api; pwd; exit 9")
	if code != 9 || out != "via-api\n"+ws+"\n" {
		t.Errorf("remote exec: %d %q %q", code, out, errs)
	}
	// A missing working directory is the same error as a local exec's.
	if _, errs, code = pf(t, ws, "exec", "-w", "/no/such/dir", "remote", "--", "true"); code != 125 || !strings.Contains(errs, "PF102") || !strings.Contains(errs, "/no/such/dir") {
		t.Errorf("remote exec -w of a missing directory: %d %q", code, errs)
	}
	out, _, _ = pf(t, ws, "session", "ls")
	if !strings.Contains(out, r.ID) {
		t.Errorf("remote ls: %q", out)
	}
	pf(t, ws, "exec", "remote", "--", "sh", "-c", "echo s > snap.txt")
	if out, errs, code := pf(t, ws, "session", "snapshot", "remote"); code != 0 || len(strings.TrimSpace(out)) != 12 {
		t.Errorf("remote snapshot: %d %q %q", code, out, errs)
	}
	if os.Geteuid() == 0 {
		for _, verb := range []string{"pause", "resume"} {
			if _, errs, code := pf(t, ws, "session", verb, "remote"); code != 0 {
				t.Errorf("remote %s: %d %q", verb, code, errs)
			}
		}
	}
	if _, errs, code = pf(t, ws, "session", "stop", "remote"); code != 0 || !strings.Contains(errs, "stopped") {
		t.Errorf("remote stop: %d %q", code, errs)
	}
}

func TestSessionPause(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the cgroup freezer needs root")
	}
	store := storeDir(t)
	ws := t.TempDir()
	// Idle for 3 s ends the session: the pause below lasts longer.
	r := startSession(t, ws, "--idle-timeout", "3s")
	// The counter is renamed into place: never seen half written.
	pf(t, ws, "exec", r.ID, "--", "sh", "-c", `i=0; while :; do i=$((i+1)); echo $i > c.tmp; mv c.tmp count; sleep 0.02; done >/dev/null 2>&1 &`)
	counter := func() string {
		m, _ := filepath.Glob(filepath.Join(store, "changesets", r.Changeset, "*", "upper", "count"))
		if len(m) == 0 {
			return ""
		}
		b, _ := os.ReadFile(m[0])
		return string(b)
	}
	deadline := time.Now().Add(10 * time.Second)
	for counter() == "" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if _, errs, code := pf(t, ws, "session", "pause", r.ID); code != 0 {
		t.Fatalf("pause: %d %q", code, errs)
	}
	before := counter()
	// Paused for longer than the idle timeout: the session stays.
	time.Sleep(3500 * time.Millisecond)
	if after := counter(); after != before || before == "" {
		t.Errorf("the session ran while paused: %q then %q", before, after)
	}
	if st := sessionStatus(t, ws, r.ID); st.State != "paused" {
		t.Errorf("state %q", st.State)
	}
	if _, errs, code := pf(t, ws, "exec", r.ID, "true"); code != 125 || !strings.Contains(errs, "PF192") || !strings.Contains(errs, "resume") {
		t.Errorf("exec while paused: %d %q", code, errs)
	}
	if _, errs, code := pf(t, ws, "session", "resume", r.ID); code != 0 {
		t.Fatalf("resume: %d %q", code, errs)
	}
	deadline = time.Now().Add(20 * time.Second)
	for counter() == before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if counter() == before {
		t.Error("the session did not resume")
	}
	// A paused session stops (thawed first), and its freezer group goes.
	pf(t, ws, "session", "pause", r.ID)
	if _, errs, code := pf(t, ws, "session", "stop", r.ID); code != 0 {
		t.Fatalf("stop while paused: %d %q", code, errs)
	}
	if m, _ := filepath.Glob("/sys/fs/cgroup/*/pinfold/session-" + r.ID); len(m) > 0 {
		t.Errorf("freezer group left: %v", m)
	}
	if m, _ := filepath.Glob("/sys/fs/cgroup/unified/pinfold/session-" + r.ID); len(m) > 0 {
		t.Errorf("freezer group left: %v", m)
	}

	// A paused session whose supervisor is killed is found lost, and its
	// frozen processes do not stay behind.
	r2 := startSession(t, ws)
	pf(t, ws, "exec", r2.ID, "--", "sh", "-c", "sleep 6161 >/dev/null 2>&1 &")
	pf(t, ws, "session", "pause", r2.ID)
	syscall.Kill(r2.Pid, syscall.SIGKILL)
	// Lost once the kernel has ended it, which a loaded machine takes its
	// time over.
	st := sessionStatus(t, ws, r2.ID)
	for end := time.Now().Add(20 * time.Second); st.State != "lost" && time.Now().Before(end); st = sessionStatus(t, ws, r2.ID) {
		time.Sleep(50 * time.Millisecond)
	}
	if st.State != "lost" {
		t.Errorf("after kill -9 while paused: %+v", st)
	}
	sessionGone(t, r2.ID, "sleep 6161")

	// A session frozen without its record saying so (a pause that
	// failed half way records nothing) still stops: stop thaws it first.
	r3 := startSession(t, ws)
	pf(t, ws, "exec", r3.ID, "--", "sh", "-c", "sleep 7171 >/dev/null 2>&1 &")
	g, _ := filepath.Glob("/sys/fs/cgroup/freezer/pinfold/session-" + r3.ID)
	if len(g) == 1 {
		if err := os.WriteFile(filepath.Join(g[0], "freezer.state"), []byte("FROZEN"), 0); err != nil {
			t.Fatal(err)
		}
		if st := sessionStatus(t, ws, r3.ID); st.State != "running" {
			t.Fatalf("state %q, want running (frozen behind its back)", st.State)
		}
		pf(t, ws, "session", "stop", r3.ID)
		sessionGone(t, r3.ID, "sleep 7171")
	} else {
		pf(t, ws, "session", "stop", r3.ID) // cgroup v2: frozen in its limits group, tested by pause above
	}
}

// sessionGone waits (30 s at most) for the session's processes running
// cmd to be gone, and checks that its freezer group went with them.
func sessionGone(t *testing.T, id, cmd string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(conformance.ProcessesWith(cmd)) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if p := conformance.ProcessesWith(cmd); len(p) > 0 {
		t.Errorf("frozen processes left: %v", p)
	}
	if m, _ := filepath.Glob("/sys/fs/cgroup/*/pinfold/session-" + id); len(m) > 0 {
		t.Errorf("freezer group left: %v", m)
	}
}

func TestSessionSnapshot(t *testing.T) {
	store := storeDir(t)
	t.Cleanup(func() { waitTrashCleaners(store) })
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "keep.txt"), []byte("keep\n"), 0o644)
	os.WriteFile(filepath.Join(ws, "gone.txt"), []byte("gone\n"), 0o644)
	os.MkdirAll(filepath.Join(ws, "dir", "sub"), 0o755)
	a := startSession(t, ws)
	pf(t, ws, "exec", a.ID, "--", "sh", "-c", "echo changed > keep.txt; rm gone.txt; mkdir -p new/deep; echo n > new/deep/f; ln -s keep.txt link; chmod 0700 new/deep/f")
	out, errs, code := pf(t, ws, "session", "snapshot", a.ID)
	snap := strings.TrimSpace(out)
	if code != 0 || len(snap) != 12 || !strings.Contains(errs, "sha256:") {
		t.Fatalf("snapshot: %d %q %q", code, out, errs)
	}
	_, stopA, _ := pf(t, ws, "session", "stop", a.ID)
	counts := func(s string) string { return regexp.MustCompile(`\d+ added, \d+ modified, \d+ deleted`).FindString(s) }
	if !strings.Contains(stopA, "1 modified, 1 deleted") {
		log, _ := os.ReadFile(filepath.Join(store, "sessions", a.ID, "log"))
		rec, _ := os.ReadFile(filepath.Join(store, "sessions", a.ID, "session.json"))
		t.Fatalf("the first session's changeset: %q\nits log:\n%s\nits record:\n%s", stopA, log, rec)
	}
	if _, errs, code := pf(t, ws, "discard", a.Changeset); code != 0 {
		t.Fatalf("discard: %q", errs)
	}
	b := startSession(t, ws, "--snapshot", snap)
	out, errs, code = pf(t, ws, "exec", b.ID, "--", "sh", "-c", "cat keep.txt new/deep/f; readlink link; stat -c %a new/deep/f; test -e gone.txt || echo no-gone")
	if code != 0 || out != "changed\nn\nkeep.txt\n700\nno-gone\n" {
		t.Errorf("restored session: %d %q %q", code, out, errs)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "keep.txt")); string(b) != "keep\n" {
		t.Errorf("the restore wrote the workspace: %q", b)
	}
	_, errs, _ = pf(t, ws, "session", "stop", b.ID)
	if counts(errs) != counts(stopA) {
		t.Errorf("the restored session's changeset: %q, the original's %q", counts(errs), counts(stopA))
	}
	if _, errs, code := pf(t, ws, "session", "start", "--snapshot", "000000000000"); code != 125 || !strings.Contains(errs, "PF190") {
		t.Errorf("an unknown snapshot: %d %q", code, errs)
	}
	if out, _, code := pf(t, ws, "session", "snapshots"); code != 0 || !strings.Contains(out, snap) || !strings.Contains(out, a.ID) {
		t.Errorf("session snapshots: %d %q", code, out)
	}
	// A snapshot of another workspace is refused, and the session that
	// was started for it leaves no record and no changeset behind.
	before, _, _ := pf(t, ws, "changes", "--all", "--json")
	other := t.TempDir()
	if _, errs, code := pf(t, other, "session", "start", "--snapshot", snap); code != 125 || !strings.Contains(errs, "PF191") {
		t.Errorf("a snapshot of another workspace: %d %q", code, errs)
	}
	if out, _, _ := pf(t, ws, "session", "ls", "--all"); strings.Count(out, "\n") != 3 {
		t.Errorf("the refused session is listed:\n%s", out)
	}
	if after, _, _ := pf(t, ws, "changes", "--all", "--json"); after != before {
		t.Errorf("the refused session left a changeset:\n%s\nbefore:\n%s", after, before)
	}
	if _, errs, code := pf(t, ws, "session", "snapshots", "--rm", snap); code != 0 {
		t.Errorf("snapshots --rm: %d %q", code, errs)
	}
	if out, _, _ := pf(t, ws, "session", "snapshots"); out != "no snapshots\n" {
		t.Errorf("after --rm: %q", out)
	}
}

// TestSessionPodman: a session is a run of the engine, so the container
// runtimes keep one too (the agent bound into the container).
func TestSessionPodman(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("podman here runs as root")
	}
	if _, err := exec.LookPath("podman"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("podman is missing on CI")
		}
		t.Skip("no podman")
	}
	t.Setenv("PINFOLD_STORE", t.TempDir())
	ws := t.TempDir()
	r := startSession(t, ws, "--backend", "podman")
	pf(t, ws, "exec", r.ID, "--", "sh", "-c", "echo p > /tmp/p; echo w > w.txt")
	out, errs, code := pf(t, ws, "exec", r.ID, "--", "sh", "-c", "cat /tmp/p w.txt; echo $HOME; exit 2")
	if code != 2 || out != "p\nw\n/home/sandbox\n" {
		t.Errorf("podman session: %d %q %q", code, out, errs)
	}
	if _, errs, code := pf(t, ws, "session", "pause", r.ID); code != 125 || !strings.Contains(errs, "PF191") {
		t.Errorf("pause on podman: %d %q", code, errs)
	}
	if _, errs, code := pf(t, ws, "session", "stop", r.ID); code != 0 || !strings.Contains(errs, "1 added") {
		t.Errorf("stop: %d %q", code, errs)
	}
}

func TestSessionPort(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 for a server in the sandbox")
	}
	t.Setenv("PINFOLD_STORE", t.TempDir())
	ws := t.TempDir()
	r := startSession(t, ws) // network none: only the agent reaches in
	_, errs, code := pf(t, ws, "exec", r.ID, "--", "sh", "-c", "cd /tmp && echo served > index.html && (python3 -m http.server --bind 127.0.0.1 8767 >/dev/null 2>&1 &); "+
		"for i in $(seq 100); do python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8767))' 2>/dev/null && exit 0; sleep 0.05; done; exit 1")
	if code != 0 {
		t.Fatalf("starting a server in the session: %q", errs)
	}
	cmd := exec.Command(pinfold, "session", "port", r.ID, "8767")
	cmd.Dir = ws
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimSpace(line)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("GET /index.html HTTP/1.0\r\n\r\n"))
	body, _ := io.ReadAll(c)
	c.Close()
	if !strings.Contains(string(body), "served") {
		t.Errorf("through the forwarded port: %q", body)
	}
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Errorf("session port after SIGINT: %v", err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Error("the port is still forwarded")
	}
}

// TestSessionsIsolated: one session sees nothing of another's processes
// or files, and cannot signal them.
func TestSessionsIsolated(t *testing.T) {
	t.Setenv("PINFOLD_STORE", t.TempDir())
	ws := t.TempDir()
	a, b := startSession(t, ws), startSession(t, ws)
	pf(t, ws, "exec", a.ID, "--", "sh", "-c", "echo secret > /tmp/only-a; echo h > $HOME/only-a; sleep 8181 >/dev/null 2>&1 &")
	hostPid := ""
	if p := conformance.ProcessesWith("sleep 8181"); len(p) == 1 {
		hostPid = strings.TrimSuffix(strings.Fields(p[0])[1], ":")
	}
	out, errs, code := pf(t, ws, "exec", b.ID, "--", "sh", "-c",
		`ls /tmp/only-a $HOME/only-a 2>&1; for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; done | grep -c '^sleep 8181'; kill -9 `+hostPid+` 2>&1; exit 0`)
	if code != 0 || strings.Count(out, "No such file") != 2 || !strings.Contains(out, "\n0\n") || !strings.Contains(out, "No such process") {
		t.Errorf("session b saw a's: %d %q %q", code, out, errs)
	}
	if len(conformance.ProcessesWith("sleep 8181")) != 1 {
		t.Error("session b killed a's process")
	}
	// A session without limits or a network stack is supervised by the
	// native runtime's small waiter, not a Go process.
	b2, _ := os.ReadFile("/proc/" + strconv.Itoa(a.Pid) + "/smaps_rollup")
	for _, l := range strings.Split(string(b2), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "Pss:" {
			if kb, _ := strconv.Atoi(f[1]); kb > 512 {
				t.Errorf("the supervisor of an idle session uses %d KiB", kb)
			}
		}
	}
}

// TestExecRefusesAsRunDoes checks that exec refuses a missing working
// directory and a malformed --env as run does (PF102, exit 125), rather
// than as a missing command or not at all.
func TestExecRefusesAsRunDoes(t *testing.T) {
	t.Setenv("PINFOLD_STORE", t.TempDir())
	ws := t.TempDir()
	r := startSession(t, ws, "--name", "refuse")
	for _, c := range []struct {
		name  string
		flags []string
		err   string
	}{
		{"missing-workdir", []string{"-w", "/nonexist"}, "the working directory /nonexist does not exist in the"},
		{"file-workdir", []string{"-w", "/etc/hostname"}, "the working directory /etc/hostname does not exist in the"},
		{"env-without-name", []string{"-e", "=1"}, `invalid --env value "=1"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, runErrs, runCode := pf(t, ws, append(append([]string{"run"}, c.flags...), "--", "pwd")...)
			if runCode != 125 || !strings.Contains(runErrs, "PF102 "+c.err) {
				t.Fatalf("run: %d %q, want 125 and PF102 %q", runCode, runErrs, c.err)
			}
			out, errs, code := pf(t, ws, append(append([]string{"exec"}, c.flags...), r.ID, "--", "pwd")...)
			if code != 125 || !strings.Contains(errs, "PF102 "+c.err) || out != "" {
				t.Errorf("exec: %d %q %q, want 125 and PF102 %q as run says", code, out, errs, c.err)
			}
		})
	}
	// A good directory and variable still work.
	out, errs, code := pf(t, ws, "exec", "-w", "/tmp", "-e", "A=1", r.ID, "--", "sh", "-c", "echo $A; pwd")
	if code != 0 || out != "1\n/tmp\n" {
		t.Errorf("exec -w /tmp -e A=1: %d %q %q", code, out, errs)
	}
}

// TestSessionStopThenApply: once session stop returns, the session's
// changeset is free to apply at once (pinfold __finish held its lock a
// moment after the session's record said it had ended).
func TestSessionStopThenApply(t *testing.T) {
	ws := t.TempDir()
	t.Setenv("PINFOLD_STORE", t.TempDir())
	for i := 0; i < 5; i++ {
		r := startSession(t, ws)
		name := fmt.Sprintf("f%d", i)
		if _, errs, code := pf(t, ws, "exec", r.ID, "--", "sh", "-c", "echo x > "+name); code != 0 {
			t.Fatalf("exec: %d %s", code, errs)
		}
		if _, errs, code := pf(t, ws, "session", "stop", r.ID); code != 0 {
			t.Fatalf("stop: %d %s", code, errs)
		}
		if _, errs, code := pf(t, ws, "apply", r.Changeset); code != 0 {
			t.Fatalf("round %d: apply right after stop: %d %s", i, code, errs)
		}
		if _, err := os.Stat(filepath.Join(ws, name)); err != nil {
			t.Fatalf("round %d: not applied: %v", i, err)
		}
	}
}

// TestSessionsRefuseAStrangersStore: the session commands trust a store's
// records and dial its agents' sockets, so a store that another user owns
// or may write to is refused, as pinfold run refuses it (exec's fast path
// hands such a store to the Go side, which says why).
func TestSessionsRefuseAStrangersStore(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making a store of another user's needs root")
	}
	ws := t.TempDir()
	for _, c := range []struct {
		what string
		prep func(dir string) error
	}{
		{"another user's", func(d string) error { return os.Chown(d, 65534, 65534) }},
		{"writable by others", func(d string) error { return os.Chmod(d, 0o777) }},
	} {
		dir := filepath.Join(t.TempDir(), "store")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := c.prep(dir); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"session", "ls"}, {"session", "status", "s"}, {"exec", "s", "--", "true"}, {"exec", "-i", "s", "true"}} {
			cmd := exec.Command(pinfold, args...)
			cmd.Dir = ws
			cmd.Env = append(os.Environ(), "PINFOLD_STORE="+dir)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), "cannot use pinfold's store") {
				t.Errorf("%s store, %v: %v %q; want it refused", c.what, args, err, out)
			}
		}
	}
}
