package cli_test

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/internal/conformance"
)

// needAppMount skips unless apps can be mounted here (CI installs
// squashfuse and squashfs-tools with scripts/test-setup.sh).
func needAppMount(t *testing.T) {
	t.Helper()
	needRoot(t)
	needTool(t, "sqfstar", "squashfuse_ll")
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
}

// appLeftovers lists what a mounted app run could leave on the host: FUSE
// mounts and squashfuse processes.
func appLeftovers(t *testing.T) []string {
	t.Helper()
	var left []string
	if b, err := os.ReadFile("/proc/self/mounts"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "fuse.squashfuse") || strings.HasPrefix(l, "pinfold-app ") {
				left = append(left, "mount: "+l)
			}
		}
	}
	for _, pid := range squashfuses() {
		left = append(left, "process "+pid)
	}
	return left
}

// squashfuses lists the pids of squashfuse daemons pinfold started (their
// arguments name an offset and a /dev/fd mount point), but for those of
// another test package's sandboxes (internal/backend/native mounts one
// too, at the same time).
func squashfuses() []string {
	var pids []string
	conformance.EachProcess(func(pid string, args []string) {
		if len(args) > 6 && args[0] == "squashfuse" && strings.HasPrefix(args[4], "offset=") && strings.HasPrefix(args[6], "/dev/fd/") && !otherTestOwns(pid) {
			pids = append(pids, pid)
		}
	})
	return pids
}

// otherTestOwns reports whether pid descends from a test binary other
// than this one.
func otherTestOwns(pid string) bool {
	self, _ := os.Executable()
	for i := 0; i < 32 && pid != "1" && pid != "0"; i++ {
		if exe, err := os.Readlink("/proc/" + pid + "/exe"); err == nil && strings.HasSuffix(exe, ".test") && exe != self {
			return true
		}
		b, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			return false
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 {
			return false
		}
		pid = f[1]
	}
	return false
}

func waitNoAppLeftovers(t *testing.T, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := appLeftovers(t)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", what, left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestAppMountedRun runs an app with its root image mounted and unpacked,
// and checks that both show the same files with the same owners, that the
// mounted run leaves no base in the store and nothing on the host, after
// a normal end, a failure and kill -9 of pinfold alike.
func TestAppMountedRun(t *testing.T) {
	needAppMount(t)
	f := newPackFixture(t)
	app := filepath.Join(f.dir, "app.pinfold")
	script := `stat -c '%u %g %a %n' /home/app /etc/passwd hello.txt; cat /etc/passwd | head -1; ` +
		`echo written > /tmp/w && cat /tmp/w; echo x > /etc/x 2>/dev/null || echo read-only; ` +
		`grep -c fuse.squashfuse /proc/self/mounts || true`
	if _, errs, code := f.pack(t, "", "app", "--base", "tar:"+f.base, "--out", app, "--", "sh", "-c", script); code != 0 {
		t.Fatalf("pack app: %d %s", code, errs)
	}
	if n := mustRun(t, "", "tar", "tf", app); !strings.Contains(n, "pinfold-root.squashfs") {
		t.Fatalf("the app has no root image:\n%s", n)
	}
	if out, errs, _ := pf(t, "/", "app", "inspect", app); !strings.Contains(out, "root image: sha256:") {
		t.Errorf("app inspect: %q %s", out, errs)
	}
	// The same inputs, another store: the same bytes, root image included.
	again := filepath.Join(f.dir, "again.pinfold")
	if _, errs, code := f.pack(t, filepath.Join(f.dir, "store-again"), "app", "--base", "tar:"+f.base, "--out", again, "--", "sh", "-c", script); code != 0 {
		t.Fatalf("pack app again: %d %s", code, errs)
	}
	if a, b := mustRun(t, "", "sha256sum", app), mustRun(t, "", "sha256sum", again); strings.Fields(a)[0] != strings.Fields(b)[0] {
		t.Errorf("two packs of the same app differ: %s %s", a, b)
	}
	want := "1000 1000 755 /home/app\n0 0 644 /etc/passwd\n0 0 644 hello.txt\nroot:x:0:0:root:/root:/bin/sh\nwritten\nread-only\n"
	for _, c := range []struct {
		name  string
		mount string // PINFOLD_APP_MOUNT
		bases bool   // the run unpacked the app into the store
	}{
		{"mounted", "", false},
		{"unpacked", "0", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := filepath.Join(t.TempDir(), "store")
			t.Setenv("PINFOLD_STORE", store)
			t.Setenv("PINFOLD_APP_MOUNT", c.mount)
			link := filepath.Join(t.TempDir(), "link.pinfold") // the init opens the file itself
			os.Symlink(app, link)
			for round := 0; round < 2; round++ { // first run, then a warm one
				got, errs, code := pf(t, "/", "run", []string{app, link}[round])
				// The last line counts the squashfuse mounts the sandbox sees:
				// the first run is mounted, and unpacks the app in the
				// background for the runs after it.
				fuse := strings.TrimPrefix(got, want)
				if code != 0 || !strings.HasPrefix(got, want) || (fuse == "0\n") != (c.bases || round > 0) {
					t.Fatalf("round %d: %d %q %s", round, code, got, errs)
				}
				for end := time.Now().Add(60 * time.Second); round == 0 && !c.bases; time.Sleep(100 * time.Millisecond) {
					if list, _, _ := pf(t, "/", "base", "ls"); strings.Contains(list, "oci") {
						break
					}
					if time.Now().After(end) {
						t.Fatal("the mounted run did not unpack the app in the background")
					}
				}
			}
			if c.bases {
				// Unpacked once, the app runs from the store from then on.
				t.Setenv("PINFOLD_APP_MOUNT", "")
				if got, errs, code := pf(t, "/", "run", app); code != 0 || got != want+"0\n" {
					t.Errorf("after an unpacked run: %d %q %s", code, got, errs)
				}
			}
			list, _, _ := pf(t, "/", "base", "ls")
			if !strings.Contains(list, "oci") {
				t.Errorf("no base in the store after the runs:\n%s", list)
			}
			waitNoAppLeftovers(t, "normal runs")
			if _, _, code := pf(t, "/", "run", app, "--", "sh", "-c", "exit 7"); code != 7 {
				t.Errorf("exit 7: %d", code)
			}
			if _, _, code := pf(t, "/", "run", app, "--", "/no/such/command"); code == 0 {
				t.Error("a missing command ran")
			}
			waitNoAppLeftovers(t, "failed runs")
		})
	}

	// kill -9 of pinfold while the command runs from the mounted image.
	t.Setenv("PINFOLD_STORE", filepath.Join(t.TempDir(), "store"))
	t.Setenv("PINFOLD_APP_MOUNT", "always")
	cmd := exec.Command(pinfold, "run", app, "--", "sh", "-c", "sleep 60 & sleep 60")
	cmd.Dir = "/"
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(squashfuses()) == 0 {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal("no squashfuse started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	cmd.Process.Kill()
	cmd.Wait()
	waitNoAppLeftovers(t, "kill -9 of pinfold")
}

// TestAppMountRefusesTampering changes one byte of an app's root image:
// the run is refused (the mounted mode checks it against its digest),
// and so is a file whose layer changed (checked once per file although
// the mounted run does not read it).
func TestAppMountRefusesTampering(t *testing.T) {
	needAppMount(t)
	f := newPackFixture(t)
	app := filepath.Join(f.dir, "app.pinfold")
	if _, errs, code := f.pack(t, "", "app", "--base", "tar:"+f.base, "--out", app, "--", "cat", "hello.txt"); code != 0 {
		t.Fatalf("pack app: %d %s", code, errs)
	}
	orig, _ := os.ReadFile(app)
	off, size := entryAt(t, orig, "pinfold-root.squashfs")
	bad := filepath.Join(f.dir, "bad.pinfold")
	for _, at := range []int64{off + size/2, off + size - 1} {
		b := bytes.Clone(orig)
		b[at] ^= 0xff
		os.WriteFile(bad, b, 0o644)
		t.Setenv("PINFOLD_STORE", filepath.Join(t.TempDir(), "store"))
		got, errs, code := pf(t, "/", "run", bad)
		if code != 125 || got != "" || !strings.Contains(errs, "does not match its digest") {
			t.Errorf("a changed root image at %d: %d %q %s", at-off, code, got, errs)
		}
	}
	// The same file changed after a run checked it: its identity differs,
	// so it is checked again. (Kept mounted: by default the first run
	// unpacks the app in the background, and later runs start from the
	// store, which never reads the root image again.)
	store := filepath.Join(t.TempDir(), "store")
	t.Setenv("PINFOLD_STORE", store)
	t.Setenv("PINFOLD_APP_MOUNT", "always")
	os.WriteFile(bad, orig, 0o644)
	if got, errs, code := pf(t, "/", "run", bad); code != 0 || got != "hello from the image\n" {
		t.Fatalf("the intact app: %d %q %s", code, got, errs)
	}
	// The check is recorded by the file's identity: later runs skip it.
	if recs, _ := os.ReadDir(filepath.Join(store, "index", "checked")); len(recs) != 1 {
		t.Errorf("records of checked files: %v", recs)
	}
	if out, errs, code := pf(t, "/", "gc"); code != 0 || !strings.Contains(out+errs, "1 records of checked app files") {
		t.Errorf("gc: %d %q %s", code, out, errs)
	}
	if recs, _ := os.ReadDir(filepath.Join(store, "index", "checked")); len(recs) != 0 {
		t.Errorf("records of checked files after gc: %v", recs)
	}
	if got, errs, code := pf(t, "/", "run", bad); code != 0 || got != "hello from the image\n" {
		t.Fatalf("the intact app after gc: %d %q %s", code, got, errs)
	}
	b := bytes.Clone(orig)
	b[off+size/3] ^= 0xff
	fh, _ := os.OpenFile(bad, os.O_WRONLY, 0)
	fh.WriteAt(b[off+size/3:off+size/3+1], off+size/3)
	fh.Close()
	if got, errs, code := pf(t, "/", "run", bad); code != 125 || got != "" {
		t.Errorf("changed in place after a checked run: %d %q %s", code, got, errs)
	}
	// A layer changed (the image's first, the base).
	lo, _ := entryAt(t, orig, "blobs/sha256/")
	b = bytes.Clone(orig)
	b[lo+100] ^= 0xff
	os.WriteFile(bad, b, 0o644)
	t.Setenv("PINFOLD_STORE", filepath.Join(t.TempDir(), "store"))
	if got, errs, code := pf(t, "/", "run", bad); code == 0 || got != "" {
		t.Errorf("a changed layer ran: %d %q %s", code, got, errs)
	}
	waitNoAppLeftovers(t, "refused runs")
}

// entryAt returns the offset and size of the data of the first tar entry
// whose name starts with prefix and holds more than 4 KiB.
func entryAt(t *testing.T, archive []byte, prefix string) (int64, int64) {
	t.Helper()
	r := bytes.NewReader(archive)
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("no %s in the archive", prefix)
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(hdr.Name, prefix) && hdr.Size > 4096 {
			return r.Size() - int64(r.Len()), hdr.Size
		}
	}
}
