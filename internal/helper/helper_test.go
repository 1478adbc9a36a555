package helper

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestFindOrder: the environment variable first, then beside the running
// binary (here the test binary), then PATH; a directory is no binary.
func TestFindOrder(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	beside := filepath.Join(filepath.Dir(exe), "pinfold-helper-test")
	if err := os.WriteFile(beside, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Skipf("cannot write beside the test binary: %v", err)
	}
	t.Cleanup(func() { os.Remove(beside) })
	path := t.TempDir()
	onPath := filepath.Join(path, "pinfold-helper-test")
	os.WriteFile(onPath, []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(path, "pinfold-helper-path-only"), []byte("#!/bin/sh\n"), 0o755)
	os.Mkdir(filepath.Join(filepath.Dir(exe), "pinfold-helper-dir"), 0o755)
	t.Cleanup(func() { os.Remove(filepath.Join(filepath.Dir(exe), "pinfold-helper-dir")) })
	t.Setenv("PATH", path)
	t.Setenv("PINFOLD_HELPER_TEST", "/from/env")

	for _, c := range []struct{ name, env, want string }{
		{"pinfold-helper-test", "PINFOLD_HELPER_TEST", "/from/env"},
		{"pinfold-helper-test", "PINFOLD_HELPER_UNSET", beside},
		{"pinfold-helper-test", "", beside},
		{"pinfold-helper-path-only", "", filepath.Join(path, "pinfold-helper-path-only")},
	} {
		if got, err := Find(c.name, c.env); err != nil || got != c.want {
			t.Errorf("Find(%s, %s) = %q, %v; want %q", c.name, c.env, got, err, c.want)
		}
	}
	if p, err := Find("pinfold-helper-dir", ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("a directory was found: %q %v", p, err)
	}
}
