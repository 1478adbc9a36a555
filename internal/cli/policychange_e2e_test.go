package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestChangesetPolicyChange: a sandboxed command that writes pinfold.yaml
// (the workspace's, and a new one in a subdirectory) does not get its
// hooks run on the host by the next run: diff says so, apply and run
// --apply refuse without --policy, apply of other paths goes on, and
// --policy applies with a warning (then, the control, the hook runs).
func TestChangesetPolicyChange(t *testing.T) {
	ws := changesetWorkspace(t)
	marker := filepath.Join(t.TempDir(), "hook-ran")
	os.WriteFile(filepath.Join(ws, "pinfold.yaml"), []byte("version: 1\n"), 0o644)
	evil := "version: 1\npre_run:\n  - touch " + marker + "\n"
	script := "printf '" + evil + "' > pinfold.yaml; mkdir sub; printf '" + evil + "' > sub/pinfold.yaml; echo x > other.txt"
	_, errs, code := pf(t, ws, "run", "--", "sh", "-c", script)
	if code != 0 {
		t.Fatalf("run: %d %s", code, errs)
	}
	id, _, _, _ := summary(t, errs)
	hook := "pre_run: touch " + marker

	out, errs, code := pf(t, ws, "diff")
	if code != 0 || !strings.Contains(errs, "this changeset changes pinfold.yaml") ||
		!strings.Contains(errs, "pinfold.yaml (modified); host hooks it adds: "+hook+"; settings it changes: pre_run") ||
		!strings.Contains(errs, "sub/pinfold.yaml (added); host hooks it adds: "+hook) ||
		!strings.Contains(errs, "without --policy") || !strings.Contains(out, "+pre_run:") {
		t.Errorf("diff: %d %q %q", code, out, errs)
	}
	out, _, code = pf(t, ws, "diff", "--json")
	var entries []struct {
		Path   string `json:"path"`
		Policy *struct {
			Keys  []string `json:"keys"`
			Hooks []string `json:"hooks"`
		} `json:"policy"`
	}
	if err := json.Unmarshal([]byte(out), &entries); err != nil || code != 0 {
		t.Fatalf("diff --json: %d %v %q", code, err, out)
	}
	flagged := map[string]bool{}
	for _, e := range entries {
		if e.Policy != nil {
			flagged[e.Path] = len(e.Policy.Hooks) == 1 && e.Policy.Hooks[0] == hook
		}
	}
	if len(flagged) != 2 || !flagged["pinfold.yaml"] || !flagged["sub/pinfold.yaml"] {
		t.Errorf("diff --json flags %v: %s", flagged, out)
	}

	_, errs, code = pf(t, ws, "apply")
	if code != 125 || !strings.Contains(errs, "PF186") || !strings.Contains(errs, "pinfold apply --policy "+id) ||
		!strings.Contains(errs, hook) {
		t.Errorf("apply: %d %q", code, errs)
	}
	if read(t, filepath.Join(ws, "pinfold.yaml")) != "version: 1\n" || read(t, filepath.Join(ws, "other.txt")) != "<open "+filepath.Join(ws, "other.txt")+": no such file or directory>" {
		t.Fatal("a refused apply wrote into the workspace")
	}
	// Other paths apply; the next run obeys the old policy.
	if _, errs, code := pf(t, ws, "apply", id, "other.txt"); code != 0 || read(t, filepath.Join(ws, "other.txt")) != "x\n" {
		t.Fatalf("apply other.txt: %d %q", code, errs)
	}
	if _, errs, code := pf(t, ws, "run", "--", "true"); code != 0 || exists(marker) {
		t.Fatalf("a run after the refused apply: %d %q, hook ran: %v", code, errs, exists(marker))
	}
	_, errs, code = pf(t, ws, "apply", "--policy", id)
	if code != 0 || !strings.Contains(errs, "warning: applying changes to pinfold.yaml") || !strings.Contains(errs, hook) {
		t.Fatalf("apply --policy: %d %q", code, errs)
	}
	if _, errs, code := pf(t, ws, "run", "--", "true"); code != 0 || !exists(marker) {
		t.Fatalf("the accepted policy's hook did not run: %d %q", code, errs)
	}
	os.Remove(marker)

	// run --apply refuses too, and leaves the changeset open.
	_, errs, code = pf(t, ws, "run", "--apply", "--", "sh", "-c", "echo '  - touch "+marker+".2' >> pinfold.yaml")
	if code == 0 || !strings.Contains(errs, "PF186") || strings.Contains(read(t, filepath.Join(ws, "pinfold.yaml")), ".2") {
		t.Errorf("run --apply: %d %q", code, errs)
	}
	if out, _, _ := pf(t, ws, "changes"); !strings.Contains(out, "open") {
		t.Errorf("the refused changeset is not open: %q", out)
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
