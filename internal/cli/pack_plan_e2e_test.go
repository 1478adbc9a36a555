package cli_test

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestPlanOfAnApp plans an app file as run APP runs it: its image as the
// base, its command (or ARGS) and its working directory, not the file as
// a command on the host base.
func TestPlanOfAnApp(t *testing.T) {
	f := newPackFixture(t)
	app := filepath.Join(f.dir, "hello.pinfold")
	if _, errs, code := f.pack(t, "", "app", "--base", "tar:"+f.base, "--out", app, "--", "./run.sh", "packed"); code != 0 {
		t.Fatalf("pack app: %d %s", code, errs)
	}
	elsewhere := t.TempDir()
	out, errs, code := pf(t, elsewhere, "plan", app)
	if code != 0 || !strings.Contains(out, "oci:"+app) || !strings.Contains(out, "./run.sh packed") || !strings.Contains(out, "workdir:    "+f.ws) {
		t.Errorf("plan APP: %d %q %s", code, out, errs)
	}
	if strings.Contains(out, "(flag --base)") || strings.Contains(out, "(flag --workdir)") || !strings.Contains(out, "(the app "+app+")") {
		t.Errorf("plan APP credits flags nobody gave: %q", out)
	}
	out, errs, code = pf(t, elsewhere, "plan", app, "--", "cat", "hello.txt")
	if code != 0 || !strings.Contains(out, "cat hello.txt") || !strings.Contains(out, "oci:"+app) {
		t.Errorf("plan APP -- ARGS: %d %q %s", code, out, errs)
	}
}
