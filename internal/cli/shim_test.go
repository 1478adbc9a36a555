package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestShimCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shims")
	t.Setenv("PINFOLD_SHIM_DIR", dir)
	ws := t.TempDir()

	out, errs, code := pf(t, ws, "shim", "install", "pftool", "npm")
	if code != 0 || !strings.Contains(out, "installed "+filepath.Join(dir, "pftool")) ||
		!strings.Contains(out, `export PATH="`+dir+`:$PATH"`) || !strings.Contains(out, "PATH does not have it yet") ||
		!strings.Contains(out, "pftool is not on PATH") {
		t.Fatalf("install: %d %q %q", code, out, errs)
	}
	os.WriteFile(filepath.Join(dir, "foreign"), []byte("#!/bin/sh\necho mine\n"), 0o755)

	out, _, code = pf(t, ws, "shim", "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "npm ") || !strings.HasPrefix(lines[1], "pftool ") ||
		!strings.Contains(lines[1], "run -- pftool") {
		t.Errorf("ls: %d %q", code, out)
	}

	if _, errs, code := pf(t, ws, "shim", "uninstall", "foreign"); code != 125 || !strings.Contains(errs, "not a pinfold shim") {
		t.Errorf("uninstall foreign: %d %q", code, errs)
	}
	if _, errs, code := pf(t, ws, "shim", "install", "foreign"); code != 125 || !strings.Contains(errs, "not a pinfold shim") {
		t.Errorf("install over foreign: %d %q", code, errs)
	}
	out, _, code = pf(t, ws, "shim", "uninstall")
	if code != 0 || strings.Count(out, "removed ") != 2 {
		t.Errorf("uninstall: %d %q", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "foreign")); err != nil {
		t.Errorf("foreign file removed: %v", err)
	}
	if _, errs, code := pf(t, ws, "shim", "frob"); code != 125 || !strings.Contains(errs, "PF101") {
		t.Errorf("unknown subcommand: %d %q", code, errs)
	}
	if _, errs, code := pf(t, ws, "shim"); code != 125 || !strings.Contains(errs, "PF101") {
		t.Errorf("no subcommand: %d %q", code, errs)
	}
}

// TestShimRunsThroughPinfold runs a shim of the real pinfold binary: the
// command reaches the sandbox with its arguments.
func TestShimRunsThroughPinfold(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shims")
	t.Setenv("PINFOLD_SHIM_DIR", dir)
	ws := t.TempDir()
	if _, errs, code := pf(t, ws, "shim", "install", "echo"); code != 0 {
		t.Fatalf("install: %q", errs)
	}
	cmd := exec.Command(filepath.Join(dir, "echo"), "hello", "from a shim")
	cmd.Dir = ws
	cmd.Env = append(os.Environ(), "PATH="+dir+":/usr/bin:/bin")
	b, err := cmd.CombinedOutput()
	if err != nil || string(b) != "hello from a shim\n" {
		t.Errorf("shim: %v %q", err, b)
	}
}
