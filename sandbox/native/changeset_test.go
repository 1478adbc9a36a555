package native_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pinfold/pinfold/sandbox"
)

// captureDirs makes the upper and work directories of a changeset root.
func captureDirs(t *testing.T) (upper, work string) {
	t.Helper()
	d := filepath.Join(t.TempDir(), "r0")
	upper, work = filepath.Join(d, "upper"), filepath.Join(d, "work")
	for _, p := range []string{upper, work} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return upper, work
}

func TestChangesetKeepsWritesAside(t *testing.T) {
	spec := baseSpec(t)
	ws := spec.Workspace
	os.WriteFile(filepath.Join(ws, "keep"), []byte("original\n"), 0o644)
	os.WriteFile(filepath.Join(ws, "gone"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(ws, "script"), []byte("#!/bin/sh\n"), 0o644)
	upper, work := captureDirs(t)
	spec.Access = sandbox.AccessChangeset
	spec.Changeset = &sandbox.Capture{Upper: upper, Work: work}
	res, out, errs := run(t, spec, &sandbox.Cmd{Args: []string{"sh", "-c",
		"echo changed >> keep; rm gone; echo new > added; chmod +x script; mkdir d; echo x > d/f; cat keep; ls"}})
	if res.ExitCode != 0 || out != "original\nchanged\nadded\nd\nkeep\nscript\n" {
		t.Fatalf("inside: %d %q %q", res.ExitCode, out, errs)
	}
	// The workspace is untouched.
	if b, _ := os.ReadFile(filepath.Join(ws, "keep")); string(b) != "original\n" {
		t.Errorf("workspace changed: %q", b)
	}
	for _, f := range []string{"gone"} {
		if _, err := os.Stat(filepath.Join(ws, f)); err != nil {
			t.Errorf("%s removed from the workspace", f)
		}
	}
	for _, f := range []string{"added", "d"} {
		if _, err := os.Stat(filepath.Join(ws, f)); err == nil {
			t.Errorf("%s created in the workspace", f)
		}
	}
	// The upper layer holds every change; a deletion is a whiteout.
	if b, _ := os.ReadFile(filepath.Join(upper, "keep")); string(b) != "original\nchanged\n" {
		t.Errorf("upper keep: %q", b)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(upper, "gone"), &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFCHR || st.Rdev != 0 {
		t.Errorf("no whiteout for gone: %v %o", err, st.Mode)
	}
	if fi, err := os.Stat(filepath.Join(upper, "script")); err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("chmod not captured: %v", err)
	}
	// A second run on the same changeset sees the first one's changes.
	res, out, _ = run(t, spec, &sandbox.Cmd{Args: []string{"sh", "-c", "cat added; ls gone 2>&1 | grep -c 'No such'"}})
	if res.ExitCode != 0 || out != "new\n1\n" {
		t.Errorf("second run: %d %q", res.ExitCode, out)
	}
	// Captures work for directories outside the workspace too.
	extra := t.TempDir()
	os.WriteFile(filepath.Join(extra, "cfg"), []byte("a"), 0o644)
	up2, wk2 := captureDirs(t)
	spec.Captures = []sandbox.Capture{{Path: extra, Upper: up2, Work: wk2}}
	res, _, errs = run(t, spec, &sandbox.Cmd{Args: []string{"sh", "-c", "echo b > " + extra + "/cfg"}})
	if b, _ := os.ReadFile(filepath.Join(extra, "cfg")); res.ExitCode != 0 || string(b) != "a" {
		t.Errorf("capture: %d %q %s", res.ExitCode, b, errs)
	}
	if b, _ := os.ReadFile(filepath.Join(up2, "cfg")); strings.TrimSpace(string(b)) != "b" {
		t.Errorf("capture upper: %q", b)
	}
}
