package cli_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hookConfig is a pinfold.yaml whose pre_run, on the host, creates marker.
func hookConfig(marker string) string {
	return "version: 1\npre_run:\n  - touch " + marker + "\n"
}

// sharedTmp makes a directory like /tmp: root's, mode 1777.
func sharedTmp(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	os.Chmod(filepath.Dir(d), 0o755) // the test's own directory, 0700
	if err := os.Chmod(d, os.ModePerm|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	return d
}

func mkdirOwned(t *testing.T, dir string, uid int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, uid); err != nil {
		t.Fatal(err)
	}
}

func writeOwned(t *testing.T, path, text string, uid int, mode os.FileMode) {
	t.Helper()
	os.Remove(path)
	if err := os.WriteFile(path, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, uid, uid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// TestUntrustedConfigIsNotRun: root running pinfold below a shared
// directory does not obey a pinfold.yaml that another user could have
// written (theirs, one in or below their directory, one writable by
// others, a symbolic link): its pre_run does not run, the walk stops there,
// and stderr says why once, naming the way to trust it. The controls (the
// same file trusted) show that the hook would run.
func TestUntrustedConfigIsNotRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files to other users")
	}
	t.Setenv("SUDO_UID", "")
	t.Setenv("PINFOLD_TRUSTED_DIRS", "")
	marker := filepath.Join(t.TempDir(), "hook-ran")
	ran := func() bool {
		_, err := os.Stat(marker)
		os.Remove(marker)
		return err == nil
	}
	top := sharedTmp(t)
	work := filepath.Join(top, "work")
	mkdirOwned(t, work, 0)
	cfg := filepath.Join(top, "pinfold.yaml")

	// Another user's file in the shared directory.
	writeOwned(t, cfg, hookConfig(marker), 65534, 0o644)
	for _, verb := range []string{"run", "plan"} {
		out, errs, code := pf(t, work, verb, "--", "true")
		if ran() {
			t.Fatalf("%s ran the pre_run of another user's %s", verb, cfg)
		}
		if code != 0 || strings.Count(errs, "not using "+cfg) != 1 || !strings.Contains(errs, "belongs to uid 65534") ||
			!strings.Contains(errs, "PINFOLD_TRUSTED_DIRS="+top) {
			t.Errorf("%s: status %d, stderr %q", verb, code, errs)
		}
		if verb == "plan" && (!strings.Contains(out, "config:   none") || !strings.Contains(out, "ignored:  "+cfg)) {
			t.Errorf("plan does not show the file passed over:\n%s", out)
		}
	}
	// Control: trusted, the same file runs its hook.
	t.Setenv("PINFOLD_TRUSTED_DIRS", "relative/dir:"+top)
	if _, errs, code := pf(t, work, "run", "--", "true"); code != 0 || !ran() || strings.Contains(errs, "not using") {
		t.Fatalf("a trusted directory's file did not run its hook: %d %q", code, errs)
	}
	os.Unsetenv("PINFOLD_TRUSTED_DIRS")

	// Root's own file, writable by others: not used either.
	writeOwned(t, cfg, hookConfig(marker), 0, 0o666)
	if _, errs, _ := pf(t, work, "run", "--", "true"); ran() || !strings.Contains(errs, "writable by its group or by others") {
		t.Errorf("a file writable by others was used: %q", errs)
	}
	writeOwned(t, cfg, hookConfig(marker), 0, 0o664)
	if _, errs, _ := pf(t, work, "run", "--", "true"); ran() || !strings.Contains(errs, "writable by its group") {
		t.Errorf("a group-writable file was used: %q", errs)
	}
	// Control: root's, 0644, in root's sticky directory: used.
	writeOwned(t, cfg, hookConfig(marker), 0, 0o644)
	if _, errs, code := pf(t, work, "run", "--", "true"); code != 0 || !ran() {
		t.Fatalf("root's own file did not run its hook: %d %q", code, errs)
	}

	// A file of root's in another user's directory, and one above another
	// user's directory: the walk stops at that directory.
	theirs := filepath.Join(top, "theirs")
	mkdirOwned(t, filepath.Join(theirs, "deeper"), 0)
	os.Chown(theirs, 65534, 65534)
	writeOwned(t, filepath.Join(theirs, "pinfold.yaml"), hookConfig(marker), 0, 0o644)
	if _, errs, _ := pf(t, filepath.Join(theirs, "deeper"), "run", "--", "true"); ran() ||
		!strings.Contains(errs, "not using "+filepath.Join(theirs, "pinfold.yaml")+": its directory belongs to uid 65534") {
		t.Errorf("a file in another user's directory was used: %q", errs)
	}
	os.Remove(filepath.Join(theirs, "pinfold.yaml"))
	if _, errs, _ := pf(t, filepath.Join(theirs, "deeper"), "run", "--", "true"); ran() ||
		!strings.Contains(errs, "not using "+cfg+": the directory "+theirs+" on the way to it belongs to uid 65534") {
		t.Errorf("the walk went on above another user's directory: %q", errs)
	}

	// A symbolic link named pinfold.yaml, to root's own good file.
	real := filepath.Join(t.TempDir(), "real.yaml")
	writeOwned(t, real, hookConfig(marker), 0, 0o644)
	os.Remove(cfg)
	if err := os.Symlink(real, filepath.Join(work, "pinfold.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, errs, _ := pf(t, work, "run", "--", "true"); ran() || !strings.Contains(errs, "symbolic link") {
		t.Errorf("a symbolic link was followed to find the policy: %q", errs)
	}
	// --config is the caller's own choice: used.
	if _, errs, code := pf(t, work, "run", "--config", filepath.Join(work, "pinfold.yaml"), "--", "true"); code != 0 || !ran() {
		t.Errorf("--config did not use the file: %d %q", code, errs)
	}
}

// TestUntrustedConfigAsUser: an ordinary user does not obey a file
// another ordinary user put above them in a shared directory.
func TestUntrustedConfigAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run as other users")
	}
	const me, other = 1000, 1001
	top := sharedTmp(t)
	home := filepath.Join(top, "home")
	work := filepath.Join(top, "work")
	mkdirOwned(t, home, me)
	mkdirOwned(t, work, me)
	marks := filepath.Join(top, "marks")
	mkdirOwned(t, marks, me)
	marker := filepath.Join(marks, "hook-ran")
	cfg := filepath.Join(top, "pinfold.yaml")
	as := func(args ...string) (string, int) {
		cmd := exec.Command(pinfold, args...)
		cmd.Dir = work
		cmd.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin", "PINFOLD_STORE=" + filepath.Join(home, "store")}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: me, Gid: me}}
		cmd.WaitDelay = 2 * time.Second
		var errb bytes.Buffer
		cmd.Stderr = &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return errb.String(), code
	}
	ran := func() bool {
		_, err := os.Stat(marker)
		os.Remove(marker)
		return err == nil
	}
	writeOwned(t, cfg, hookConfig(marker), other, 0o644)
	for _, verb := range []string{"plan", "run"} {
		errs, _ := as(verb, "--", "true")
		if ran() {
			t.Fatalf("%s as uid %d ran the hook of uid %d's file", verb, me, other)
		}
		if strings.Count(errs, "not using "+cfg+": it belongs to uid 1001, not to you (uid 1000) or root") != 1 {
			t.Errorf("%s: stderr %q", verb, errs)
		}
	}
	// Control: the user's own file runs its hook.
	writeOwned(t, cfg, hookConfig(marker), me, 0o644)
	if errs, _ := as("run", "--", "true"); !ran() {
		t.Errorf("the user's own file did not run its hook: %q", errs)
	}
}

// TestLaunchCacheTrustChange: a recorded run whose config was trusted is
// not replayed once a directory on the way to it belongs to another user:
// the Go side then passes over the file and says so.
func TestLaunchCacheTrustChange(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory to another user")
	}
	st := needLaunchCache(t)
	root := t.TempDir()
	ws := filepath.Join(root, "a", "b")
	os.MkdirAll(ws, 0o755)
	writeOwned(t, filepath.Join(root, "pinfold.yaml"), "version: 1\nhostname: configured\n", 0, 0o644)
	settle()
	prime(t, st, ws, runRO(echoMark...)...)
	if !replayed(t, ws, runRO(echoMark...)...) {
		t.Fatal("not replayed before the change")
	}
	os.Chown(filepath.Join(root, "a"), 65534, 65534)
	out, errs, code := pf(t, ws, runRO(echoMark...)...)
	if code != 0 || out != "no\n" || !strings.Contains(errs, "not using "+filepath.Join(root, "pinfold.yaml")) {
		t.Errorf("after the change: status %d, output %q, stderr %q", code, out, errs)
	}
}
