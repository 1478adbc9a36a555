package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAppRefusesMountsOverItsFiles runs a signed app from the parent of
// the workspace it was packed from, after the host's copy of its script
// changed: a workspace (or --mount) over the app's files is refused, so
// what runs is always the app's own script; a mount elsewhere runs.
func TestAppRefusesMountsOverItsFiles(t *testing.T) {
	needRoot(t)
	f := newPackFixture(t)
	key, pub := newSigningKey(t, f.dir, "good")
	app := filepath.Join(f.dir, "signed.pinfold")
	if _, errs, code := f.pack(t, "", "app", "--base", "tar:"+f.base, "--out", app, "--sign-key", key, "--", "./run.sh", "packed"); code != 0 {
		t.Fatalf("pack app: %d %s", code, errs)
	}
	os.WriteFile(filepath.Join(f.ws, "run.sh"), []byte("#!/bin/sh\necho TAMPERED host file ran\n"), 0o755)
	t.Setenv("PINFOLD_STORE", filepath.Join(f.dir, "store-run"))
	data := filepath.Join(f.dir, "data")
	os.Mkdir(data, 0o755)
	elsewhere := filepath.Join(f.dir, "elsewhere")
	os.Mkdir(elsewhere, 0o755)
	want := "run.sh packed\nhello from the image\n"
	for _, c := range []struct {
		name string
		dir  string
		args []string
	}{
		{"parent-ro", f.dir, []string{"run", "--verify-key", pub, "--access", "ro", app}},
		{"parent-rw", f.dir, []string{"run", "--access", "rw", app}},
		{"workspace-itself", f.ws, []string{"run", "--access", "ro", app}},
		{"workspace-flag", elsewhere, []string{"run", "--workspace", f.ws, "--access", "ro", app}},
		{"mount-over-workdir", elsewhere, []string{"run", "--mount", data + ":" + f.ws, app}},
		{"mount-below-workdir", elsewhere, []string{"run", "--mount", data + ":" + f.ws + "/sub", app}},
		{"mount-over-image-dir", elsewhere, []string{"run", "--mount", data + ":/bin", app}},
		{"mount-over-root", elsewhere, []string{"run", "--mount", data + ":/", app}},
		{"plan-parent-ro", f.dir, []string{"plan", "--access", "ro", app}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errs, code := pf(t, c.dir, c.args...)
			if code != 125 || !strings.Contains(errs, "PF179") || strings.Contains(out, "TAMPERED") {
				t.Errorf("%v in %s: %d %q %s", c.args, c.dir, code, out, errs)
			}
		})
	}
	// Elsewhere, a workspace and a mount the image does not have run the
	// app's own files.
	for _, args := range [][]string{
		{"run", "--access", "ro", app},
		{"run", "--verify-key", pub, "--mount", data + ":/data", app},
	} {
		if out, errs, code := pf(t, elsewhere, args...); code != 0 || out != want {
			t.Errorf("%v: %d %q %s", args, code, out, errs)
		}
	}
}
