package cli_test

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// changesetID finds the id in run's summary line.
var summaryRE = regexp.MustCompile(`pinfold: changeset ([0-9a-f]+): (\d+) added, (\d+) modified, (\d+) deleted`)

func summary(t *testing.T, stderr string) (id string, added, modified, deleted int) {
	t.Helper()
	m := summaryRE.FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no changeset summary in %q", stderr)
	}
	a, _ := strconv.Atoi(m[2])
	mo, _ := strconv.Atoi(m[3])
	d, _ := strconv.Atoi(m[4])
	return m[1], a, mo, d
}

// changesetWorkspace is a workspace with a private store.
func changesetWorkspace(t *testing.T) string {
	t.Helper()
	store := filepath.Join(t.TempDir(), "store")
	t.Setenv("PINFOLD_STORE", store)
	// Before the store goes: the detached cleaners that applies and
	// discards start finish, and pinfold clean empties what they leave.
	t.Cleanup(func() { waitTrashCleaners(store) })
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "keep.txt"), []byte("one\ntwo\nthree\n"), 0o644)
	os.WriteFile(filepath.Join(ws, "gone.txt"), []byte("bye\n"), 0o644)
	os.WriteFile(filepath.Join(ws, "run.sh"), []byte("#!/bin/sh\n"), 0o644)
	os.MkdirAll(filepath.Join(ws, "dir"), 0o755)
	os.WriteFile(filepath.Join(ws, "dir", "old"), []byte("old\n"), 0o644)
	return ws
}

const changes = `echo four >> keep.txt; rm gone.txt; echo new > added.txt; chmod +x run.sh; rm -rf dir; mkdir dir; echo fresh > dir/new; printf '\0\1\2' > blob.bin`

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

func TestChangesetReviewAndApply(t *testing.T) {
	ws := changesetWorkspace(t)
	// A script of two lines: the changes table still gives it one row.
	_, errs, code := pf(t, ws, "run", "--", "sh", "-c", changes+"\n: second line")
	if code != 0 {
		t.Fatalf("run: %d %s", code, errs)
	}
	id, added, modified, deleted := summary(t, errs)
	// added.txt, blob.bin, dir/new; keep.txt, run.sh; gone.txt, dir/old.
	if added != 3 || modified != 2 || deleted != 2 {
		t.Errorf("summary %d/%d/%d: %s", added, modified, deleted, errs)
	}
	if read(t, filepath.Join(ws, "keep.txt")) != "one\ntwo\nthree\n" || read(t, filepath.Join(ws, "gone.txt")) != "bye\n" {
		t.Fatal("the workspace changed before apply")
	}
	out, _, _ := pf(t, ws, "changes")
	if !strings.Contains(out, id) || !strings.Contains(out, "open") || !strings.Contains(out, "+3 ~2 -2") ||
		strings.Count(out, "\n") != 2 || !strings.Contains(out, `$'echo four`) || !strings.Contains(out, `\n: second line'`) {
		t.Errorf("changes: %s", out)
	}
	out, _, _ = pf(t, ws, "diff", "--name-status")
	for _, want := range []string{"A\tadded.txt", "A\tblob.bin", "A\tdir/new", "M\tkeep.txt", "M\trun.sh", "D\tdir/old", "D\tgone.txt"} {
		if !strings.Contains(out, want) {
			t.Errorf("name-status lacks %q:\n%s", want, out)
		}
	}
	out, _, _ = pf(t, ws, "diff", id, "keep.txt", "run.sh", "blob.bin")
	for _, want := range []string{"diff --git a/keep.txt b/keep.txt", "+four", "old mode 100644", "new mode 100755", "Binary files"} {
		if !strings.Contains(out, want) {
			t.Errorf("diff lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "added.txt") {
		t.Errorf("diff ignored PATHS:\n%s", out)
	}
	out, _, _ = pf(t, ws, "diff", "--stat")
	if !strings.Contains(out, "7 files changed") {
		t.Errorf("stat:\n%s", out)
	}
	var js []map[string]any
	out, _, _ = pf(t, ws, "diff", "--json")
	files := 0
	for _, e := range js {
		if e["type"] != "dir" {
			files++
		}
	}
	if err := json.Unmarshal([]byte(out), &js); err != nil || len(js) == 0 {
		t.Errorf("json: %v %s", err, out)
	}
	files = 0
	for _, e := range js {
		if e["type"] != "dir" {
			files++
		}
	}
	if files != 7 {
		t.Errorf("json lists %d files, want 7: %s", files, out)
	}
	_, errs, code = pf(t, ws, "apply", id)
	if code != 0 {
		t.Fatalf("apply: %d %s", code, errs)
	}
	// Counted as the summary counts: files, not their directories.
	if !strings.Contains(errs, "applied changeset "+id+": 3 added, 2 modified, 2 deleted") {
		t.Errorf("apply said %q", errs)
	}
	if read(t, filepath.Join(ws, "keep.txt")) != "one\ntwo\nthree\nfour\n" || read(t, filepath.Join(ws, "added.txt")) != "new\n" ||
		read(t, filepath.Join(ws, "dir", "new")) != "fresh\n" {
		t.Error("apply did not write the changes")
	}
	for _, gone := range []string{"gone.txt", "dir/old"} {
		if _, err := os.Lstat(filepath.Join(ws, gone)); err == nil {
			t.Errorf("%s survived apply", gone)
		}
	}
	if fi, err := os.Stat(filepath.Join(ws, "run.sh")); err != nil || fi.Mode()&0o111 == 0 {
		t.Error("apply lost the mode change")
	}
	out, _, _ = pf(t, ws, "changes")
	if strings.Contains(out, id) {
		t.Errorf("an applied changeset is still listed: %s", out)
	}
}

func TestChangesetConflictAndForce(t *testing.T) {
	ws := changesetWorkspace(t)
	_, errs, _ := pf(t, ws, "run", "--", "sh", "-c", "echo mine >> keep.txt")
	id, _, _, _ := summary(t, errs)
	// Someone edits the original meanwhile.
	time.Sleep(10 * time.Millisecond)
	os.WriteFile(filepath.Join(ws, "keep.txt"), []byte("theirs\n"), 0o644)
	_, errs, code := pf(t, ws, "apply")
	if code != 125 || !strings.Contains(errs, "PF181") || !strings.Contains(errs, "keep.txt") {
		t.Fatalf("conflict not refused: %d %s", code, errs)
	}
	if read(t, filepath.Join(ws, "keep.txt")) != "theirs\n" {
		t.Fatal("a refused apply wrote")
	}
	if _, errs, code = pf(t, ws, "apply", "--force", id); code != 0 {
		t.Fatalf("--force: %d %s", code, errs)
	}
	if read(t, filepath.Join(ws, "keep.txt")) != "one\ntwo\nthree\nmine\n" {
		t.Errorf("forced apply: %q", read(t, filepath.Join(ws, "keep.txt")))
	}
}

func TestChangesetDiscardApplyAndRerun(t *testing.T) {
	ws := changesetWorkspace(t)
	_, errs, _ := pf(t, ws, "run", "--", "sh", "-c", "echo x > junk")
	id, _, _, _ := summary(t, errs)
	if _, errs, code := pf(t, ws, "discard", id); code != 0 {
		t.Fatalf("discard: %s", errs)
	}
	if _, _, code := pf(t, ws, "diff", id); code != 125 {
		t.Error("a discarded changeset is still there")
	}
	// --apply applies when the command succeeds...
	_, errs, code := pf(t, ws, "run", "--apply", "--", "sh", "-c", "echo auto > auto.txt")
	if code != 0 || read(t, filepath.Join(ws, "auto.txt")) != "auto\n" || !strings.Contains(errs, "applied 1 added") {
		t.Errorf("--apply: %d %q", code, errs)
	}
	// ...and keeps the changeset when it fails.
	_, errs, code = pf(t, ws, "run", "--apply", "--", "sh", "-c", "echo bad > bad.txt; exit 3")
	if code != 3 || read(t, filepath.Join(ws, "bad.txt")) != "<open "+filepath.Join(ws, "bad.txt")+": no such file or directory>" ||
		!strings.Contains(errs, "not applying: the command failed (exit status 3)") {
		t.Errorf("--apply after failure: %d %q", code, errs)
	}
	id, _, _, _ = summary(t, errs)
	// A rerun on the open changeset sees and extends it.
	out, errs, code := pf(t, ws, "run", "--changeset", id, "--", "sh", "-c", "cat bad.txt; echo more > more.txt")
	if code != 0 || out != "bad\n" {
		t.Fatalf("rerun: %d %q %q", code, out, errs)
	}
	if id2, added, _, _ := summary(t, errs); id2 != id || added != 2 {
		t.Errorf("rerun summary: %s", errs)
	}
	// No changes, no changeset.
	_, errs, _ = pf(t, ws, "run", "--", "cat", "keep.txt")
	if strings.Contains(errs, "changeset") {
		t.Errorf("a read-only command left a changeset: %s", errs)
	}
}

func TestCaptureAndExport(t *testing.T) {
	ws := changesetWorkspace(t)
	extra := t.TempDir()
	os.WriteFile(filepath.Join(extra, "conf"), []byte("a\n"), 0o644)
	_, errs, code := pf(t, ws, "run", "--capture", extra, "--", "sh", "-c", "echo b > "+extra+"/conf; rm gone.txt")
	if code != 0 || read(t, filepath.Join(extra, "conf")) != "a\n" {
		t.Fatalf("capture: %d %s", code, errs)
	}
	id, _, modified, deleted := summary(t, errs)
	if modified != 1 || deleted != 1 {
		t.Errorf("capture summary: %s", errs)
	}
	layer := filepath.Join(t.TempDir(), "layer.tar")
	if _, errs, code := pf(t, ws, "export", id, "-o", layer); code != 0 {
		t.Fatalf("export: %s", errs)
	}
	// -o - is standard output, as tar's -f - is.
	if out, errs, code := pf(t, ws, "export", id, "-o", "-"); code != 0 || len(out) != int(fileSize(t, layer)) {
		t.Errorf("export -o -: %d, %d bytes, want %d; %s", code, len(out), fileSize(t, layer), errs)
	}
	if _, err := os.Stat(filepath.Join(ws, "-")); err == nil {
		t.Error("export -o - wrote a file named -")
	}
	f, _ := os.Open(layer)
	defer f.Close()
	tr := tar.NewReader(f)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	joined := strings.Join(names, "\n")
	wsRel, extraRel := strings.TrimPrefix(ws, "/"), strings.TrimPrefix(extra, "/")
	if !strings.Contains(joined, wsRel+"/.wh.gone.txt") || !strings.Contains(joined, extraRel+"/conf") {
		t.Errorf("layer entries:\n%s", joined)
	}
	out, _, _ := pf(t, ws, "diff", "--name-status", id)
	if !strings.Contains(out, "M\t"+extraRel+"/conf") || !strings.Contains(out, "D\tgone.txt") {
		t.Errorf("diff of a capture:\n%s", out)
	}
	// A captured path as diff shows it applies alone.
	if _, errs, code := pf(t, ws, "apply", id, extraRel+"/conf"); code != 0 || read(t, filepath.Join(extra, "conf")) != "b\n" ||
		read(t, filepath.Join(ws, "gone.txt")) != "bye\n" {
		t.Errorf("apply of a captured path: %d %s", code, errs)
	}
	if _, errs, code := pf(t, ws, "apply", id); code != 0 || read(t, filepath.Join(extra, "conf")) != "b\n" {
		t.Errorf("apply of a capture: %d %s", code, errs)
	}
	if _, err := os.Stat(filepath.Join(ws, "gone.txt")); err == nil {
		t.Error("the rest of the changeset was not applied")
	}
}

func TestChangesetOwnership(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ws := changesetWorkspace(t)
	filepath.Walk(ws, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 1234, 1234) })
	_, errs, code := pf(t, ws, "run", "--apply", "--", "sh", "-c", "echo x > made; mkdir made-dir; echo y >> keep.txt")
	if code != 0 {
		t.Fatalf("run: %s", errs)
	}
	for _, f := range []string{"made", "made-dir", "keep.txt"} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(ws, f), &st); err != nil || st.Uid != 1234 || st.Gid != 1234 {
			t.Errorf("%s: %v owned by %d:%d, want the workspace owner", f, err, st.Uid, st.Gid)
		}
	}
}

func TestChangesetUnprivileged(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switching to another user needs root")
	}
	ws := changesetWorkspace(t)
	store := filepath.Join(t.TempDir(), "store")
	os.Chmod(filepath.Dir(store), 0o755)
	os.Mkdir(store, 0o700)
	os.Chown(store, 65534, 65534)
	os.Chmod(filepath.Dir(ws), 0o755)
	filepath.Walk(ws, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 65534, 65534) })
	run := func(args ...string) (string, int) {
		cmd := exec.Command(pinfold, args...)
		cmd.Dir = ws
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "PINFOLD_STORE=" + store}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return string(out), code
	}
	out, code := run("run", "--", "sh", "-c", changes)
	if code != 0 {
		t.Fatalf("unprivileged changeset run: %d %s", code, out)
	}
	id, added, modified, deleted := summary(t, out)
	if added != 3 || modified != 2 || deleted != 2 {
		t.Errorf("summary: %s", out)
	}
	if out, code = run("apply", id); code != 0 || read(t, filepath.Join(ws, "added.txt")) != "new\n" {
		t.Errorf("unprivileged apply: %d %s", code, out)
	}
}

func TestKill9MidApplyRecovers(t *testing.T) {
	ws := changesetWorkspace(t)
	// A changeset big enough that apply takes a while.
	script := `for i in $(seq 1 1500); do echo "file $i" > f$i; done; for i in $(seq 1 50); do head -c 200000 /dev/urandom > big$i; done`
	_, errs, code := pf(t, ws, "run", "--", "sh", "-c", script)
	if code != 0 {
		t.Fatalf("run: %s", errs)
	}
	id, _, _, _ := summary(t, errs)
	// Kill apply once it has started writing (its marker exists), retrying
	// with a new changeset when it finishes first.
	store := os.Getenv("PINFOLD_STORE")
	marker := func(id string) bool {
		_, err := os.Stat(filepath.Join(store, "applying", id))
		return err == nil
	}
	killed := false
	for attempt := 0; attempt < 6 && !killed; attempt++ {
		cmd := exec.Command(pinfold, "apply", id)
		cmd.Dir = ws
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for end := time.Now().Add(20 * time.Second); !marker(id) && !procZombie(cmd.Process.Pid) && time.Now().Before(end); {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(time.Duration(attempt*3) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		err := cmd.Wait()
		if ee, ok := err.(*exec.ExitError); ok && ee.Sys().(syscall.WaitStatus).Signaled() && marker(id) {
			killed = true
			break
		}
		// It finished: make the next changeset to try on.
		for _, f := range []string{"f1", "big1"} {
			os.Remove(filepath.Join(ws, f))
		}
		_, errs, _ := pf(t, ws, "run", "--", "sh", "-c", script)
		id, _, _, _ = summary(t, errs)
	}
	if !killed {
		t.Fatal("could not kill apply while it was writing")
	}
	// No half-written file: every f$i is absent or complete.
	for i := 1; i <= 1500; i++ {
		b, err := os.ReadFile(filepath.Join(ws, fmt.Sprintf("f%d", i)))
		if err == nil && string(b) != fmt.Sprintf("file %d\n", i) {
			t.Fatalf("f%d half written: %q", i, b)
		}
	}
	// The next pinfold command finishes the apply (or, when the kill came
	// before apply wrote anything, leaves the changeset open to apply).
	out, errs, code := pf(t, ws, "changes")
	if code != 0 {
		t.Fatalf("recovery: %d %q %q", code, out, errs)
	}
	if !strings.Contains(errs, "finished applying changeset "+id) {
		if !strings.Contains(out, id) {
			t.Fatalf("the changeset was neither applied nor kept: %q %q", out, errs)
		}
		if _, errs, code = pf(t, ws, "apply", id); code != 0 {
			t.Fatalf("apply after an early kill: %s", errs)
		}
	}
	for i := 1; i <= 1500; i += 97 {
		if got := read(t, filepath.Join(ws, fmt.Sprintf("f%d", i))); got != fmt.Sprintf("file %d\n", i) {
			t.Errorf("f%d after recovery: %q", i, got)
		}
	}
	ents, _ := os.ReadDir(ws)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".pinfold-apply") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
	_ = bytes.Contains
}

// TestConcurrentApplyProcesses applies 40 changesets that write the same
// file from 40 pinfold processes at once: one applies, the other 39 refuse
// with PF181, and the file holds the winner's version.
func TestConcurrentApplyProcesses(t *testing.T) {
	ws := changesetWorkspace(t)
	const n = 40
	ids := make([]string, n)
	for i := range n {
		_, errs, code := pf(t, ws, "run", "--", "sh", "-c", fmt.Sprintf("echo version %d > keep.txt", i))
		if code != 0 {
			t.Fatalf("run %d: %s", i, errs)
		}
		ids[i], _, _, _ = summary(t, errs)
	}
	type result struct {
		i, code int
		errs    string
	}
	results := make(chan result, n)
	for i, id := range ids {
		cmd := exec.Command(pinfold, "apply", id)
		cmd.Dir = ws
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			cmd.Wait()
			results <- result{i, cmd.ProcessState.ExitCode(), errb.String()}
		}()
	}
	winner, wins := -1, 0
	for range n {
		r := <-results
		switch {
		case r.code == 0:
			winner, wins = r.i, wins+1
		case r.code != 125 || !strings.Contains(r.errs, "PF181"):
			t.Errorf("apply %d: exit %d %q, want success or PF181", r.i, r.code, r.errs)
		}
	}
	if got := read(t, filepath.Join(ws, "keep.txt")); wins != 1 || got != fmt.Sprintf("version %d\n", winner) {
		t.Fatalf("%d applies succeeded; keep.txt holds %q (winner %d)", wins, got, winner)
	}
}

// TestApplyDropsSetIDBits: a sandboxed command that makes a set-id
// program leaves, after review and apply, a plain executable.
func TestApplyDropsSetIDBits(t *testing.T) {
	ws := changesetWorkspace(t)
	_, errs, code := pf(t, ws, "run", "--", "sh", "-c", "cp /bin/true tool && chmod 6755 tool && mkdir shared && chmod 2775 shared")
	if code != 0 {
		t.Fatalf("run: %s", errs)
	}
	id, _, _, _ := summary(t, errs)
	out, _, _ := pf(t, ws, "diff", id, "tool")
	if !strings.Contains(out, "new file mode 100755") || !strings.Contains(out, "bits of 106755 are not applied") {
		t.Errorf("diff does not flag the set-id bits:\n%s", out)
	}
	_, errs, code = pf(t, ws, "apply", id)
	if code != 0 || !strings.Contains(errs, "without their set-user-id/set-group-id bits") || !strings.Contains(errs, "tool") {
		t.Fatalf("apply: %d %s", code, errs)
	}
	for name, want := range map[string]os.FileMode{"tool": 0o755, "shared": 0o775 | os.ModeDir} {
		fi, err := os.Stat(filepath.Join(ws, name))
		if err != nil || fi.Mode() != want {
			t.Errorf("%s: %v %v, want %v", name, fi.Mode(), err, want)
		}
	}
	// run --apply says it too.
	_, errs, code = pf(t, ws, "run", "--apply", "--", "sh", "-c", "cp /bin/true tool2 && chmod 4755 tool2")
	if code != 0 || !strings.Contains(errs, "tool2") || !strings.Contains(errs, "set-id") {
		t.Fatalf("run --apply: %d %s", code, errs)
	}
	if fi, _ := os.Stat(filepath.Join(ws, "tool2")); fi == nil || fi.Mode()&os.ModeSetuid != 0 {
		t.Errorf("tool2 kept its set-user-id bit: %v", fi)
	}
}

// storeDir is a store of the test's own, set as PINFOLD_STORE, whose
// removal at the end waits for what pinfold does on it in the background
// (waitTrashCleaners): a TempDir removed under a process still writing
// there fails the test ("directory not empty").
func storeDir(t *testing.T) string {
	store := t.TempDir()
	t.Setenv("PINFOLD_STORE", store)
	t.Cleanup(func() { waitTrashCleaners(store) })
	return store
}

// waitTrashCleaners waits (up to 10 s) for the `pinfold clean --trash`
// processes working on store, stops the shared network helpers serving a
// socket in it (one started in the background binds it later), then
// removes what they left.
func waitTrashCleaners(store string) {
	helper := []byte("serve\x00" + filepath.Join(store, "net-"))
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		busy := false
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if err != nil {
				continue
			}
			if bytes.Contains(cmd, helper) {
				if pid, err := strconv.Atoi(e.Name()); err == nil && !procZombie(pid) {
					syscall.Kill(pid, syscall.SIGKILL)
					busy = true
				}
				continue
			}
			if !bytes.Contains(cmd, []byte("clean\x00--trash")) {
				continue
			}
			env, _ := os.ReadFile("/proc/" + e.Name() + "/environ")
			if bytes.Contains(env, []byte("PINFOLD_STORE="+store+"\x00")) {
				busy = true
			}
		}
		if !busy {
			break
		}
	}
	cmd := exec.Command(pinfold, "clean")
	cmd.Env = append(os.Environ(), "PINFOLD_STORE="+store)
	cmd.Run()
}

// TestChangesetIDArguments: an argument that looks like an id but names
// no changeset, or paths that name nothing in it, fail with a code
// instead of doing nothing; short unique prefixes work, ambiguous ones
// are refused naming the candidates, and paths keep working.
func TestChangesetIDArguments(t *testing.T) {
	ws := changesetWorkspace(t)
	var ids []string
	run := func(script string) string {
		t.Helper()
		_, errs, code := pf(t, ws, "run", "--", "sh", "-c", script)
		if code != 0 {
			t.Fatalf("run: %d %s", code, errs)
		}
		id, _, _, _ := summary(t, errs)
		ids = append(ids, id)
		return id
	}
	a := run("echo 1 > one.txt")
	b := run("echo 2 > two.txt")
	unused := func(n int) string { // a prefix of n hex digits no id has
		for i := 0; ; i++ {
			p := fmt.Sprintf("%0*x", n, i*7919%(1<<(4*n)))
			if !strings.HasPrefix(a, p) && !strings.HasPrefix(b, p) {
				return p
			}
		}
	}
	refused := func(code int, want ...string) func(args ...string) {
		return func(args ...string) {
			t.Helper()
			out, errs, c := pf(t, ws, args...)
			if c != code {
				t.Errorf("%v: exit %d, want %d: %q %q", args, c, code, out, errs)
			}
			for _, w := range want {
				if !strings.Contains(errs, w) {
					t.Errorf("%v: stderr lacks %q: %q", args, w, errs)
				}
			}
		}
	}
	for _, p := range []string{unused(1), unused(2), unused(3), "deadbeef0123"} {
		if strings.HasPrefix(a, p) || strings.HasPrefix(b, p) {
			continue
		}
		refused(125, "PF180", "no changeset "+p)("apply", p)
		refused(125, "PF180", "no changeset "+p)("diff", p)
		refused(125, "PF180")("discard", p)
	}
	if _, err := os.Stat(filepath.Join(ws, "two.txt")); err == nil {
		t.Fatal("a refused apply wrote two.txt")
	}
	// Paths that match nothing, with and without an id.
	refused(125, "PF185", "nosuch.txt")("apply", b, "two.txt", "nosuch.txt")
	refused(125, "PF185", "nosuch.txt")("diff", "nosuch.txt")
	refused(125, "PF185", "two.txt")("diff", a, "two.txt")
	if _, err := os.Stat(filepath.Join(ws, "two.txt")); err == nil {
		t.Fatal("an apply with a wrong path wrote two.txt")
	}
	// A short unique prefix names its changeset.
	short := a[:2]
	if strings.HasPrefix(b, short) {
		short = a[:5]
	}
	if out, errs, code := pf(t, ws, "diff", "--name-status", short); code != 0 || out != "A\tone.txt\n" {
		t.Errorf("diff %s: %d %q %q", short, code, out, errs)
	}
	// Documented paths keep working, on the newest open changeset.
	if out, errs, code := pf(t, ws, "diff", "--name-status", "two.txt"); code != 0 || out != "A\ttwo.txt\n" {
		t.Errorf("diff two.txt: %d %q %q", code, out, errs)
	}
	if _, errs, code := pf(t, ws, "apply", "two.txt"); code != 0 || read(t, filepath.Join(ws, "two.txt")) != "2\n" {
		t.Errorf("apply two.txt: %d %q", code, errs)
	}
	// An ambiguous prefix names the candidates.
	for tries := 0; ; tries++ {
		seen := map[byte]string{}
		var x, y string
		for _, id := range ids {
			if o, ok := seen[id[0]]; ok && id != b {
				x, y = o, id
				break
			}
			if id != b { // b was applied and is gone
				seen[id[0]] = id
			}
		}
		if x != "" {
			refused(125, "PF180", "ambiguous", x, y)("diff", x[:1])
			refused(125, "PF180", "ambiguous", x, y)("apply", x[:1])
			break
		}
		if tries > 20 {
			t.Fatal("no two changesets share a first digit")
		}
		run(fmt.Sprintf("echo %d > n%d.txt", tries, tries))
	}
}

// TestPartialApplyOfSetIDFile: a file the command made set-user-id is
// applied without the bit, and is then no longer a change of the
// changeset (its diff held only the note that the bit is dropped).
func TestPartialApplyOfSetIDFile(t *testing.T) {
	ws := changesetWorkspace(t)
	os.WriteFile(filepath.Join(ws, "ok.txt"), []byte("ok\n"), 0o644)
	_, errs, code := pf(t, ws, "run", "--", "sh", "-c", "chmod 4755 ok.txt; echo z > z.txt")
	if code != 0 {
		t.Fatalf("run: %s", errs)
	}
	id, added, modified, _ := summary(t, errs)
	if added != 1 || modified != 1 {
		t.Fatalf("summary: %s", errs)
	}
	if _, errs, code = pf(t, ws, "apply", id, "ok.txt"); code != 0 || !strings.Contains(errs, "ok.txt") {
		t.Fatalf("apply ok.txt: %d %s", code, errs)
	}
	if fi, err := os.Stat(filepath.Join(ws, "ok.txt")); err != nil || fi.Mode() != 0o755 {
		t.Fatalf("ok.txt after apply: %v %v", fi.Mode(), err)
	}
	if out, _, _ := pf(t, ws, "diff", "--name-status", id); out != "A\tz.txt\n" {
		t.Errorf("after applying ok.txt, the changeset lists:\n%s", out)
	}
	if out, _, _ := pf(t, ws, "diff", id); strings.Contains(out, "ok.txt") {
		t.Errorf("after applying ok.txt, its diff is still shown:\n%s", out)
	}
	if out, _, _ := pf(t, ws, "changes"); !strings.Contains(out, "+1 ~0 -0") {
		t.Errorf("changes after the partial apply: %s", out)
	}
	if _, errs, code = pf(t, ws, "apply", id); code != 0 || read(t, filepath.Join(ws, "z.txt")) != "z\n" {
		t.Errorf("apply of the rest: %d %s", code, errs)
	}
}

// startChangesetRun starts a changeset run of script (which must echo
// "started") and waits until it runs.
func startChangesetRun(t *testing.T, ws, script string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(pinfold, "run", "--", "sh", "-c", script, "pinfold-cli-test-marker")
	cmd.Dir = ws
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for end := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), "started"); {
		if time.Now().After(end) {
			t.Fatalf("the run did not start: %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cmd
}

// TestInterruptedChangesets: while a run goes, apply and discard say a run
// holds its changeset (PF183); once it is killed, apply names the
// interrupted changesets, discard drops one, and pinfold clean removes
// those that hold nothing.
func TestInterruptedChangesets(t *testing.T) {
	ws := changesetWorkspace(t)
	loop := "; echo started; while :; do sleep 0.05; done"
	cmd := startChangesetRun(t, ws, "true"+loop)
	for _, c := range []string{"apply", "discard", "diff"} {
		if _, errs, code := pf(t, ws, c); code != 125 || !strings.Contains(errs, "PF183") || !strings.Contains(errs, "still going") {
			t.Errorf("%s while a run goes: %d %q", c, code, errs)
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	waitGone(t, 20*time.Second)
	out, _, _ := pf(t, ws, "changes")
	m := regexp.MustCompile(`([0-9a-f]{12})\s+interrupted .*\+0 ~0 -0`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("changes after kill -9: %s", out)
	}
	empty := m[1]
	if _, errs, code := pf(t, ws, "apply"); code != 125 || !strings.Contains(errs, "PF180") || !strings.Contains(errs, empty) ||
		!strings.Contains(errs, "interrupted") {
		t.Errorf("apply with only an interrupted changeset: %d %q", code, errs)
	}
	// One with changes stays through clean, and discard drops it.
	cmd = startChangesetRun(t, ws, "echo x > w.txt"+loop)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	waitGone(t, 20*time.Second)
	out, errs, code := pf(t, ws, "clean")
	if code != 0 || !strings.Contains(out, "removed empty changeset "+empty) {
		t.Fatalf("clean: %d %q %q", code, out, errs)
	}
	out, _, _ = pf(t, ws, "changes")
	m = regexp.MustCompile(`([0-9a-f]{12})\s+interrupted .*\+1 ~0 -0`).FindStringSubmatch(out)
	if m == nil || strings.Contains(out, empty) {
		t.Fatalf("changes after clean: %s", out)
	}
	full := m[1]
	// Without fingerprints of the originals, apply needs --force.
	if _, errs, code := pf(t, ws, "apply", full); code != 125 || !strings.Contains(errs, "PF181") || !strings.Contains(errs, "interrupted") {
		t.Errorf("apply of an interrupted changeset: %d %q", code, errs)
	}
	if _, err := os.Stat(filepath.Join(ws, "w.txt")); err == nil {
		t.Error("the refused apply wrote w.txt")
	}
	if _, errs, code := pf(t, ws, "discard"); code != 0 || !strings.Contains(errs, "discarded changeset "+full) ||
		!strings.Contains(errs, "interrupted") {
		t.Errorf("discard of an interrupted changeset: %d %q", code, errs)
	}
	if out, _, _ = pf(t, ws, "changes"); out != "no changesets\n" {
		t.Errorf("changes at the end: %s", out)
	}
	cmd = startChangesetRun(t, ws, "echo y > v.txt"+loop)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	waitGone(t, 20*time.Second)
	out, _, _ = pf(t, ws, "changes")
	m = regexp.MustCompile(`([0-9a-f]{12})\s+interrupted`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("changes after the third kill -9: %s", out)
	}
	if _, errs, code := pf(t, ws, "apply", "--force", m[1]); code != 0 {
		t.Errorf("apply --force of an interrupted changeset: %d %q", code, errs)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "v.txt")); err != nil || string(b) != "y\n" {
		t.Errorf("v.txt after apply --force: %q %v", b, err)
	}
}

// TestJSONResultWithChangeset: run --json puts the changeset in its result
// and still prints the summary on stderr; a run without changes has none;
// errors print the result line with the error and pinfold's status.
func TestJSONResultWithChangeset(t *testing.T) {
	ws := changesetWorkspace(t)
	type result struct {
		Status    int    `json:"status"`
		Reason    string `json:"reason"`
		Changeset *struct {
			ID       string `json:"id"`
			Status   string `json:"status"`
			Added    int    `json:"added"`
			Modified int    `json:"modified"`
			Deleted  int    `json:"deleted"`
		} `json:"changeset"`
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Fix     string `json:"fix"`
		} `json:"error"`
	}
	runJSON := func(args ...string) (result, string, int) {
		t.Helper()
		out, errs, code := pf(t, ws, append([]string{"run", "--json"}, args...)...)
		var r result
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
			t.Fatalf("%v: no JSON result: %v: %q %q", args, err, out, errs)
		}
		return r, errs, code
	}
	// Twice: the second run may start from a launch record.
	for i := range 2 {
		r, errs, code := runJSON("--", "sh", "-c", "echo x > j.txt; echo y >> keep.txt; rm gone.txt")
		if code != 0 || r.Status != 0 || r.Changeset == nil {
			t.Fatalf("run %d: %d %+v %q", i, code, r, errs)
		}
		id, _, _, _ := summary(t, errs)
		if c := r.Changeset; c.ID != id || c.Status != "open" || c.Added != 1 || c.Modified != 1 || c.Deleted != 1 {
			t.Errorf("run %d: changeset %+v, summary %q", i, *c, errs)
		}
		if out, _, _ := pf(t, ws, "changes"); !strings.Contains(out, id) {
			t.Errorf("run %d: %s not listed: %s", i, id, out)
		}
		pf(t, ws, "discard", id)
	}
	r, errs, code := runJSON("--apply", "--", "sh", "-c", "echo x > applied.txt")
	if code != 0 || r.Changeset == nil || r.Changeset.Status != "applied" || r.Changeset.Added != 1 || read(t, filepath.Join(ws, "applied.txt")) != "x\n" {
		t.Errorf("--apply: %d %+v %q", code, r, errs)
	}
	if r, errs, code := runJSON("--", "true"); code != 0 || r.Changeset != nil || strings.Contains(errs, "changeset") {
		t.Errorf("a run that writes nothing: %d %+v %q", code, r, errs)
	}
	for _, c := range []struct {
		args []string
		code int
		pf   string
	}{
		{nil, 125, "PF101"},
		{[]string{"--no-such-flag", "--", "true"}, 125, "PF101"},
		{[]string{"--", "no-such-command"}, 127, "PF150"},
		{[]string{"--", "/etc/hostname"}, 126, "PF151"},
	} {
		r, errs, code := runJSON(c.args...)
		if code != c.code || r.Status != c.code || r.Reason != "error" || r.Error == nil || r.Error.Code != c.pf ||
			r.Error.Message == "" || !strings.Contains(errs, c.pf) {
			t.Errorf("%v: exit %d %+v %q", c.args, code, r, errs)
		}
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
