package cli_test

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The launch cache is tested through the binary: a run records its
// launch, the test marks the record (an extra variable in the command's
// environment that only a replay can add), and later runs show whether
// they were replayed.

const replayMark = "PINFOLD_REPLAYED=1"

// echoMark prints whether the command was started from a (marked) record.
var echoMark = []string{"sh", "-c", `echo ${PINFOLD_REPLAYED:-no}`}

func needLaunchCache(t *testing.T) string {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		t.Skip("the launch cache is built for amd64 only")
	}
	st := storeDir(t)
	return st
}

// settle waits until what a test just changed is old enough to be
// recorded (see racyAge).
func settle() { time.Sleep(2100 * time.Millisecond) }

// freshWorkspace is a workspace old enough to be recorded.
func freshWorkspace(t *testing.T) string {
	t.Helper()
	ws := t.TempDir()
	settle()
	return ws
}

// prime runs args once, checks it left exactly one record, and marks it.
func prime(t *testing.T, st, ws string, args ...string) {
	t.Helper()
	os.RemoveAll(filepath.Join(st, "launch"))
	if _, errs, code := pf(t, ws, args...); code != 0 {
		t.Fatalf("%v: status %d: %s", args, code, errs)
	}
	recs, _ := filepath.Glob(filepath.Join(st, "launch", "*"))
	if len(recs) != 1 {
		t.Fatalf("%v left %d launch records, want 1", args, len(recs))
	}
	markRecord(t, recs[0])
}

// markRecord appends replayMark to the environment of the record's
// M_EXEC message.
func markRecord(t *testing.T, path string) {
	t.Helper()
	editRecord(t, path, 6, func(data []byte) []byte { // R_EXEC
		env := append([]byte(replayMark), 0)
		data = binary.NativeEndian.AppendUint16(data, 2) // E_ENV
		data = append(data, 0, 0)
		data = binary.NativeEndian.AppendUint32(data, uint32(len(env)))
		data = append(data, env...)
		for len(data)%4 != 0 {
			data = append(data, 0)
		}
		binary.NativeEndian.PutUint32(data[4:], uint32(len(data)-8))
		return data
	})
}

// replayed runs args (which must run echoMark) and reports whether the
// run was replayed from the marked record.
func replayed(t *testing.T, ws string, args ...string) bool {
	t.Helper()
	out, errs, code := pf(t, ws, args...)
	switch {
	case code != 0:
		t.Fatalf("%v: status %d: %s", args, code, errs)
	case out == "1\n":
		return true
	case out != "no\n":
		t.Fatalf("%v: output %q", args, out)
	}
	return false
}

func runRO(cmd ...string) []string { return append([]string{"run", "--access", "ro", "--"}, cmd...) }

func TestLaunchCacheReplaysAnyCommand(t *testing.T) {
	st := needLaunchCache(t)
	ws := freshWorkspace(t)
	prime(t, st, ws, runRO("true")...)
	if !replayed(t, ws, runRO(echoMark...)...) {
		t.Fatal("a repeated run was not replayed")
	}
	// The command's status, signals and output streams on a replay.
	if _, errs, code := pf(t, ws, runRO("sh", "-c", `test "$PINFOLD_REPLAYED" = 1 && exit 7`)...); code != 7 {
		t.Errorf("exit status %d, want 7: %s", code, errs)
	}
	if _, _, code := pf(t, ws, runRO("sh", "-c", `test "$PINFOLD_REPLAYED" = 1 && kill -INT $$`)...); code != 130 {
		t.Errorf("killed by SIGINT: status %d, want 130", code)
	}
	cmd := exec.Command(pinfold, runRO("sh", "-c", `echo $PINFOLD_REPLAYED; cat; echo out; echo err >&2`)...)
	cmd.Dir, cmd.Stdin = ws, strings.NewReader("not read without -i\n")
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil || out.String() != "1\nout\n" || errb.String() != "err\n" {
		t.Errorf("streams: %v %q %q", err, out.String(), errb.String())
	}
	// A command that cannot start falls back to the Go side, which
	// explains it.
	if _, errs, code := pf(t, ws, runRO("/no/such/command")...); code != 127 || !strings.Contains(errs, "PF150") {
		t.Errorf("missing command: status %d: %s", code, errs)
	}
	// Other flags are another key.
	if replayed(t, ws, "run", "--access", "ro", "--hostname", "other", "--", echoMark[0], echoMark[1], echoMark[2]) {
		t.Error("a run with other flags was replayed")
	}
	// With 1 (or 0, 2) closed, the launcher's own descriptors would take
	// its place: the Go side runs instead (and gives the command
	// /dev/null there).
	cmd = exec.Command("sh", "-c", `"$0" run --access ro -- sh -c 'echo $PINFOLD_REPLAYED >&2; echo x' >&-`, pinfold)
	cmd.Dir = ws
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != "\n" {
		t.Errorf("closed stdout: %v %q (want the Go side, not a replay)", err, out)
	}
}

func TestLaunchCacheFlagValueDashDash(t *testing.T) {
	st := needLaunchCache(t)
	ws := freshWorkspace(t)
	// "--" is the value of --hostname here, not the end of the flags: no
	// record, or "-- -- CMD" would replay with "--" as the command.
	if _, errs, code := pf(t, ws, "run", "--access", "ro", "--hostname", "--", "true"); code != 0 {
		t.Fatalf("status %d: %s", code, errs)
	}
	if recs, _ := filepath.Glob(filepath.Join(st, "launch", "*")); len(recs) != 0 {
		t.Errorf("recorded a run whose first -- was a flag's value: %v", recs)
	}
}

func TestLaunchCacheTimeoutAndStdin(t *testing.T) {
	st := needLaunchCache(t)
	ws := freshWorkspace(t)
	prime(t, st, ws, "run", "--access", "ro", "--timeout", "0.3", "-i", "--", "true")
	start := time.Now()
	_, errs, code := pf(t, ws, "run", "--access", "ro", "--timeout", "0.3", "-i", "--", "sh", "-c",
		`test "$PINFOLD_REPLAYED" = 1 && sleep 60`)
	if code != 124 || !strings.Contains(errs, "killed: timeout") || time.Since(start) > 20*time.Second {
		t.Errorf("timeout on a replay: status %d after %v: %s", code, time.Since(start), errs)
	}
	cmd := exec.Command(pinfold, "run", "--access", "ro", "--timeout", "0.3", "-i", "--", "sh", "-c", `echo $PINFOLD_REPLAYED; cat`)
	cmd.Dir, cmd.Stdin = ws, strings.NewReader("in\n")
	if out, err := cmd.Output(); err != nil || string(out) != "1\nin\n" {
		t.Errorf("-i on a replay: %v %q", err, out)
	}
}

func TestLaunchCacheInvalidation(t *testing.T) {
	st := needLaunchCache(t)
	root := t.TempDir()
	ws := filepath.Join(root, "a", "b")
	os.MkdirAll(ws, 0o755)
	settle()
	for _, c := range []struct {
		name   string
		change func() (undo func())
	}{
		{"config in the workspace", func() func() {
			f := filepath.Join(ws, "pinfold.yaml")
			os.WriteFile(f, []byte("version: 1\nhostname: configured\n"), 0o644)
			return func() { os.Remove(f) }
		}},
		{"config in a parent", func() func() {
			f := filepath.Join(root, "pinfold.yaml")
			os.WriteFile(f, []byte("version: 1\nhostname: configured\n"), 0o644)
			return func() { os.Remove(f) }
		}},
		{"workspace mode", func() func() {
			os.Chmod(ws, 0o700)
			return func() { os.Chmod(ws, 0o755) }
		}},
		{"interrupted apply pending", func() func() {
			os.MkdirAll(filepath.Join(st, "applying", "no-such-changeset"), 0o700)
			return func() { os.RemoveAll(filepath.Join(st, "applying")) }
		}},
		{"environment", func() func() {
			os.Setenv("PINFOLD_LAUNCH_TEST", "1")
			return func() { os.Unsetenv("PINFOLD_LAUNCH_TEST") }
		}},
		{"another pinfold binary", func() func() {
			b, _ := os.ReadFile(pinfold)
			other := filepath.Join(t.TempDir(), "pinfold")
			os.WriteFile(other, b, 0o755)
			old := pinfold
			pinfold = other
			return func() { pinfold = old }
		}},
		{"record writable by others", func() func() {
			recs, _ := filepath.Glob(filepath.Join(st, "launch", "*"))
			for _, r := range recs {
				os.Chmod(r, 0o666)
			}
			return func() {}
		}},
		{"record owned by another user", func() func() {
			recs, _ := filepath.Glob(filepath.Join(st, "launch", "*"))
			for _, r := range recs {
				os.Lchown(r, 65534, 65534)
			}
			return func() {}
		}},
	} {
		prime(t, st, ws, runRO(echoMark...)...)
		if !replayed(t, ws, runRO(echoMark...)...) {
			t.Fatalf("%s: not replayed before the change", c.name)
		}
		undo := c.change()
		if replayed(t, ws, runRO(echoMark...)...) {
			t.Errorf("%s: replayed after the change", c.name)
		}
		undo()
		settle()
	}
}

// TestStoreWritableByOthersRefused: a store others may write is used
// neither by a replay nor by the Go side, which says why.
func TestStoreWritableByOthersRefused(t *testing.T) {
	st := needLaunchCache(t)
	ws := freshWorkspace(t)
	prime(t, st, ws, runRO(echoMark...)...)
	if !replayed(t, ws, runRO(echoMark...)...) {
		t.Fatal("not replayed before the change")
	}
	os.Chmod(st, 0o777)
	defer os.Chmod(st, 0o700)
	for _, args := range [][]string{runRO(echoMark...), {"run", "--", "true"}} {
		out, errs, code := pf(t, ws, args...)
		if code != 125 || !strings.Contains(errs, "PF160") || !strings.Contains(errs, "others may write") || out != "" {
			t.Errorf("%v in a store mode 0777: %d %q %q", args, code, out, errs)
		}
	}
}

func TestLaunchCacheDispatchPinsTheCommand(t *testing.T) {
	st := needLaunchCache(t)
	ws := t.TempDir()
	cfg := "version: 1\nprofiles:\n  quiet:\n    hostname: quiet\ndispatch:\n  - command: make\n    profile: quiet\n"
	if err := os.WriteFile(filepath.Join(ws, "pinfold.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	settle()
	prime(t, st, ws, runRO(echoMark...)...)
	if !replayed(t, ws, runRO(echoMark...)...) {
		t.Fatal("the same command was not replayed")
	}
	// With dispatch rules another command may get another profile.
	if replayed(t, ws, runRO("sh", "-c", `echo ${PINFOLD_REPLAYED:-no}`, "other")...) {
		t.Error("another command was replayed despite dispatch rules")
	}
}

func TestLaunchCacheKillLeavesNothing(t *testing.T) {
	st := needLaunchCache(t)
	ws := freshWorkspace(t)
	prime(t, st, ws, runRO("true")...)
	cmd := exec.Command(pinfold, runRO("sh", "-c", `echo $PINFOLD_REPLAYED; exec sleep 31.7`)...)
	cmd.Dir = ws
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "1\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("not replayed: %q", line)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for {
		left := sleepers("31.7")
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox outlived pinfold: pids %v", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sleepers returns the pids of processes running "sleep ARG".
func sleepers(arg string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if string(b) == "sleep\x00"+arg+"\x00" {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestStoreHiddenFromTheWorkspace(t *testing.T) {
	ws := t.TempDir()
	st := filepath.Join(ws, "store")
	t.Setenv("PINFOLD_STORE", st)
	for _, access := range []string{"rw", "ro", "changeset"} {
		out, _, code := pf(t, ws, "run", "--access", access, "--", "sh", "-c",
			`ls -A "$0" | wc -l; touch "$0/written" 2>/dev/null && echo wrote; true`, st)
		if code != 0 || strings.TrimSpace(out) != "0" {
			t.Errorf("--access %s: the store inside the workspace is visible or writable: %d %q", access, code, out)
		}
		if _, err := os.Stat(filepath.Join(st, "written")); err == nil {
			t.Fatalf("--access %s: the sandbox wrote into the store", access)
		}
	}
}

// TestStoreRefusedAsMountOrWorkspace: the store itself, or a directory
// in it, cannot be mounted, captured or be the workspace (a sandbox that
// wrote launch records or apply journals would act on the host later).
func TestStoreRefusedAsMountOrWorkspace(t *testing.T) {
	ws := t.TempDir()
	st := filepath.Join(t.TempDir(), "store")
	t.Setenv("PINFOLD_STORE", st)
	if _, errs, code := pf(t, ws, "run", "--", "true"); code != 0 {
		t.Fatalf("a first run: %d %s", code, errs)
	}
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(filepath.Join(st, "changesets"), link)
	inStore := filepath.Join(st, "changesets")
	for name, c := range map[string]struct {
		dir  string
		args []string
	}{
		"-v the store":          {ws, []string{"--access", "ro", "-v", st + ":/s"}},
		"-v a dir in it":        {ws, []string{"--access", "ro", "-v", inStore + ":/s"}},
		"-v a link into it":     {ws, []string{"--access", "ro", "-v", link + ":/s"}},
		"--capture a dir in it": {ws, []string{"--capture", inStore}},
		"workspace in it, rw":   {inStore, []string{"--access", "rw"}},
		"workspace in it":       {inStore, nil},
	} {
		args := append(append([]string{"run"}, c.args...), "--", "sh", "-c", "touch /s/pwn 2>/dev/null; touch pwn 2>/dev/null; true")
		_, errs, code := pf(t, c.dir, args...)
		if code != 125 || !strings.Contains(errs, "pinfold's store") {
			t.Errorf("%s: %d %q", name, code, errs)
		}
	}
	for _, p := range []string{filepath.Join(st, "pwn"), filepath.Join(inStore, "pwn")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("the sandbox wrote %s", p)
		}
	}
	// --access none in the store runs (nothing of it is shown).
	if _, errs, code := pf(t, inStore, "run", "--access", "none", "--", "true"); code != 0 {
		t.Errorf("--access none in the store: %d %s", code, errs)
	}
}

func TestInheritedDescriptorsStayOut(t *testing.T) {
	st := needLaunchCache(t)
	ws := freshWorkspace(t)
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("secret\n"), 0o600)
	run := func() string {
		f, err := os.Open(secret)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd := exec.Command(pinfold, runRO("sh", "-c", `echo ${PINFOLD_REPLAYED:-no}; cat <&3`)...)
		cmd.Dir, cmd.ExtraFiles = ws, []*os.File{f}
		out, _ := cmd.Output()
		return string(out)
	}
	if out := run(); out != "no\n" {
		t.Errorf("the Go side: the command read pinfold's caller's fd 3: %q", out)
	}
	prime(t, st, ws, runRO("true")...)
	if out := run(); out != "1\n" {
		t.Errorf("a replay: the command read pinfold's caller's fd 3: %q", out)
	}
}

// TestLaunchCacheChangesets replays the default run, which keeps a
// changeset: the replay makes it (directories, lock, record), the waiter
// removes it when the command wrote nothing, and pinfold __finish records
// and reports it when it did, as the Go side would.
func TestLaunchCacheChangesets(t *testing.T) {
	st := needLaunchCache(t)
	t.Cleanup(func() { waitTrashCleaners(st) })
	ws := freshWorkspace(t)
	prime(t, st, ws, "run", "--", "true")
	left := func() []string {
		ids, _ := filepath.Glob(filepath.Join(st, "changesets", "*"))
		return ids
	}
	if ids := left(); len(ids) != 0 {
		t.Fatalf("a run that wrote nothing left changesets %v", ids)
	}
	if !replayed(t, ws, append([]string{"run", "--"}, echoMark...)...) {
		t.Fatal("a repeated changeset run was not replayed")
	}
	if ids := left(); len(ids) != 0 {
		t.Fatalf("a replay that wrote nothing left changesets %v", ids)
	}

	cmd := []string{"sh", "-c", `echo $PINFOLD_REPLAYED; printf 'a"b\\c' > "new file"; exit 3`}
	out, errs, code := pf(t, ws, append([]string{"run", "--"}, cmd...)...)
	if out != "1\n" || code != 3 {
		t.Fatalf("not replayed, or the status is lost: %q, status %d: %s", out, code, errs)
	}
	ids := left()
	if len(ids) != 1 {
		t.Fatalf("changesets after a replay that wrote: %v", ids)
	}
	id := filepath.Base(ids[0])
	if !strings.Contains(errs, "pinfold: changeset "+id+": 1 added, 0 modified, 0 deleted") {
		t.Errorf("no summary of changeset %s: %q", id, errs)
	}
	if _, err := os.Stat(filepath.Join(ws, "new file")); err == nil {
		t.Error("the write reached the workspace before apply")
	}
	js, errs, code := pf(t, ws, "changes", "--json")
	var list []struct {
		ID        string   `json:"id"`
		Status    string   `json:"status"`
		Workspace string   `json:"workspace"`
		Command   []string `json:"command"`
		Added     int      `json:"added"`
		ExitCode  int      `json:"exit_code"`
	}
	if code != 0 || json.Unmarshal([]byte(js), &list) != nil || len(list) != 1 {
		t.Fatalf("changes --json: status %d %q %s", code, js, errs)
	}
	c := list[0]
	if c.ID != id || c.Status != "open" || c.Workspace != ws || !slices.Equal(c.Command, cmd) || c.Added != 1 || c.ExitCode != 3 {
		t.Errorf("the replay's changeset: %+v, want id %s, open, %s, %q, 1 added, exit 3", c, id, ws, cmd)
	}
	if _, errs, code := pf(t, ws, "apply", id); code != 0 {
		t.Fatalf("apply: status %d: %s", code, errs)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "new file")); err != nil || string(b) != `a"b\c` {
		t.Errorf("applied file: %q %v", b, err)
	}
}

// TestLaunchCacheNetwork replays a run with --network allow served by the
// shared network helper: the launcher connects to it, passes the
// sandbox's device on and hands the report off to it; without a shared
// helper the Go side runs it.
func TestLaunchCacheNetwork(t *testing.T) {
	st := needLaunchCache(t)
	t.Cleanup(func() { waitTrashCleaners(st) })
	ws := freshWorkspace(t)
	allow := []string{"run", "--network", "allow", "--allow", "example.org", "--"}
	// The first run starts the shared helper, which the record needs.
	if _, errs, code := pf(t, ws, append(allow, "true")...); code != 0 {
		t.Fatalf("first run: %d %s", code, errs)
	}
	var sock string
	for end := time.Now().Add(30 * time.Second); sock == ""; time.Sleep(20 * time.Millisecond) {
		if socks, _ := filepath.Glob(filepath.Join(st, "net-*.sock")); len(socks) == 1 {
			sock = socks[0]
		} else if time.Now().After(end) {
			t.Fatal("no shared network helper")
		}
	}
	prime(t, st, ws, append(allow, "true")...)
	if !replayed(t, ws, append(allow, echoMark...)...) {
		t.Fatal("a repeated network run was not replayed")
	}
	out, errs, code := pf(t, ws, append(allow, "sh", "-c", `echo $PINFOLD_REPLAYED; getent hosts x.invalid; exit 4`)...)
	if out != "1\n" || code != 4 {
		t.Fatalf("not replayed, or the status is lost: %q, status %d: %s", out, code, errs)
	}
	m := regexp.MustCompile(`blocked (\d+) attempts \(log: (\S+)\):\n\s+dns\s+x\.invalid: not in the allow list`).FindStringSubmatch(errs)
	if m == nil {
		t.Fatalf("no violation summary from the helper: %q", errs)
	}
	if log, err := os.ReadFile(m[2]); err != nil || fmt.Sprint(strings.Count(string(log), "\n")) != m[1] ||
		!strings.HasPrefix(m[2], filepath.Join(st, "runs")+"/") {
		t.Errorf("log %s: %q %v", m[2], log, err)
	}

	// Without the shared helper the launcher leaves the run to the Go side.
	killHelper(t, sock)
	if replayed(t, ws, append(allow, echoMark...)...) {
		t.Error("replayed without a shared helper")
	}
	// Nor does it start the command when what answers at the socket does
	// not take the run (the launcher reads the greeting while the init
	// builds the sandbox: the command never starts before it).
	killHelper(t, sock)
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte(`{"error":"busy"}`))
			c.Close()
		}
	}()
	if replayed(t, ws, append(allow, echoMark...)...) {
		t.Error("replayed by a helper that did not take the run")
	}
}

// killHelper ends the shared network helper serving sock, waiting (up to
// 20 s) for one started in the background to be there.
func killHelper(t *testing.T, sock string) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if killHelperOnce(sock) {
			return
		}
	}
	t.Fatalf("no helper serves %s", sock)
}

func killHelperOnce(sock string) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if args := strings.Split(string(b), "\x00"); len(args) >= 3 && args[1] == "serve" && args[2] == sock {
			pid, _ := strconv.Atoi(e.Name())
			syscall.Kill(pid, syscall.SIGKILL)
			for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				if _, err := os.Stat("/proc/" + e.Name()); err != nil {
					break
				}
			}
			os.Remove(sock)
			return true
		}
	}
	return false
}

// TestWorkspaceUnderVarTmp: on the host base /var/tmp is the sandbox's
// /tmp, and a workspace below it still shows at its own path (through the
// symbolic link it landed below /tmp).
func TestWorkspaceUnderVarTmp(t *testing.T) {
	needRoot(t)
	ws, err := os.MkdirTemp("/var/tmp", "pinfold-test-ws-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ws) })
	t.Setenv("PINFOLD_STORE", t.TempDir())
	script := `pwd; echo t > /var/tmp/probe; cat /tmp/probe; echo w > written`
	for _, access := range []string{"rw", "changeset"} {
		out, errs, code := pf(t, ws, "run", "--access", access, "--", "sh", "-c", script)
		if code != 0 || out != ws+"\nt\n" {
			t.Errorf("--access %s: %d %q %s", access, code, out, errs)
		}
	}
	if b, err := os.ReadFile(filepath.Join(ws, "written")); err != nil || string(b) != "w\n" {
		t.Errorf("the rw run's write: %q %v", b, err)
	}
}

// TestChangesetRootMode: the workspace's root shows its own mode inside a
// changeset run (overlayfs shows the upper directory's), on the Go side
// and replayed.
func TestChangesetRootMode(t *testing.T) {
	st := needLaunchCache(t)
	ws := t.TempDir()
	os.Chmod(ws, 0o751)
	settle()
	args := []string{"run", "--", "sh", "-c", `stat -c %a .; echo ${PINFOLD_REPLAYED:-no}`}
	if out, errs, code := pf(t, ws, args...); code != 0 || out != "751\nno\n" {
		t.Errorf("the Go side: %d %q %s", code, out, errs)
	}
	prime(t, st, ws, args...)
	if out, errs, code := pf(t, ws, args...); code != 0 || out != "751\n1\n" {
		t.Errorf("replayed: %d %q %s", code, out, errs)
	}
}

// A replayed changeset run whose command ended alone leaves no changeset
// (the waiter takes an empty one out without waiting for the sandbox's
// teardown); one that left a writer running records what it wrote, once
// the sandbox is gone, and the record matches the files.
func TestReplayedChangesetOfLateWriters(t *testing.T) {
	st := needLaunchCache(t)
	ws := freshWorkspace(t)
	prime(t, st, ws, "run", "--", "true")
	for i := 0; i < 5; i++ {
		if _, errs, code := pf(t, ws, "run", "--", "sh", "-c", `test "$PINFOLD_REPLAYED" = 1 || exit 9`); code != 0 ||
			strings.Contains(errs, "changeset") {
			t.Fatalf("alone: status %d (9: not replayed): %s", code, errs)
		}
	}
	if out, _, _ := pf(t, ws, "changes"); out != "no changesets\n" {
		t.Fatalf("runs that wrote nothing left changesets: %s", out)
	}
	ents, _ := os.ReadDir(filepath.Join(st, "changesets"))
	if len(ents) != 0 {
		t.Fatalf("the store keeps %d changeset directories", len(ents))
	}
	idRe := regexp.MustCompile(`changeset ([0-9a-f]{12}): 1 added`)
	for i := 0; i < 5; i++ {
		_, errs, code := pf(t, ws, "run", "--", "sh", "-c",
			`test "$PINFOLD_REPLAYED" = 1 || exit 9; (while :; do echo x >> late.txt; done) & sleep 0.05`)
		m := idRe.FindStringSubmatch(errs)
		if code != 0 || m == nil {
			t.Fatalf("a writer left running: status %d (9: not replayed): %s", code, errs)
		}
		upper := filepath.Join(st, "changesets", m[1], "r0", "upper", "late.txt")
		before := fileSize(t, upper)
		time.Sleep(100 * time.Millisecond)
		if after := fileSize(t, upper); before == 0 || after != before {
			t.Errorf("round %d: late.txt was %d bytes when recorded, %d after", i, before, after)
		}
		out, _, code := pf(t, ws, "diff", m[1])
		if code != 0 || !strings.Contains(out, "+++ b/late.txt") {
			t.Errorf("round %d: diff: %d %q", i, code, out)
		}
		pf(t, ws, "discard", m[1])
	}
}
