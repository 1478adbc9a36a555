package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type doctorReport struct {
	Kernel string `json:"kernel"`
	UID    int    `json:"uid"`
	Checks []struct {
		ID      string `json:"id"`
		Title   string `json:"title"`
		Status  string `json:"status"`
		Detail  string `json:"detail"`
		Fix     string `json:"fix"`
		Fixable bool   `json:"fixable"`
	} `json:"checks"`
	Fixes []struct {
		ID     string `json:"id"`
		Result string `json:"result"`
		Error  string `json:"error"`
	} `json:"fixes"`
}

func doctorJSON(t *testing.T, out string) doctorReport {
	t.Helper()
	var r doctorReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	return r
}

func (r doctorReport) status(id string) string {
	for _, c := range r.Checks {
		if c.ID == id {
			return c.Status
		}
	}
	return "missing"
}

// TestDoctorHost: this machine runs sandboxes, so no check fails.
func TestDoctorHost(t *testing.T) {
	t.Setenv("PINFOLD_STORE", t.TempDir())
	out, errs, code := pf(t, t.TempDir(), "doctor", "--json", "--quick")
	r := doctorJSON(t, out)
	if code != 0 || errs != "" {
		t.Errorf("status %d, stderr %q\n%s", code, errs, out)
	}
	want := []string{"userns", "seccomp", "cgroup.controllers", "store.writable", "store.space", "bases"}
	if os.Geteuid() == 0 {
		want = append(want, "userns.unprivileged", "cgroup.version")
	}
	for _, id := range want {
		if s := r.status(id); s != "pass" {
			t.Errorf("%s: %s", id, s)
		}
	}
	if s := r.status("podman"); s != "missing" {
		t.Errorf("--quick ran the podman check: %s", s)
	}
	if r.Kernel == "" || len(r.Checks) < 10 {
		t.Errorf("report %+v", r)
	}

	out, _, code = pf(t, t.TempDir(), "doctor", "--quick")
	if code != 0 || !strings.Contains(out, "PASS  user namespaces") || !strings.Contains(out, "pinfold doctor: Linux ") {
		t.Errorf("text report (status %d):\n%s", code, out)
	}
}

func TestDoctorFailsAndFixes(t *testing.T) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "file")
	os.WriteFile(file, nil, 0o600)

	// A store that cannot exist: the check fails, and so does doctor.
	t.Setenv("PINFOLD_STORE", filepath.Join(file, "store"))
	out, _, code := pf(t, tmp, "doctor", "--quick")
	if code != 1 || !strings.Contains(out, "FAIL  store directory") || !strings.Contains(out, "To fix:") ||
		!strings.Contains(out, "PINFOLD_STORE") {
		t.Errorf("status %d:\n%s", code, out)
	}
	out, _, code = pf(t, tmp, "doctor", "--quick", "--json")
	if r := doctorJSON(t, out); code != 1 || r.status("store.writable") != "fail" {
		t.Errorf("json: status %d %s", code, out)
	}

	// A missing store warns (status 0) and --fix creates it.
	store := filepath.Join(tmp, "a", "store")
	t.Setenv("PINFOLD_STORE", store)
	out, _, code = pf(t, tmp, "doctor", "--quick")
	if code != 0 || !strings.Contains(out, "WARN  store directory") || !strings.Contains(out, "pinfold doctor --fix does this") {
		t.Errorf("missing store: status %d:\n%s", code, out)
	}
	out, _, code = pf(t, tmp, "doctor", "--quick", "--fix")
	if code != 0 || !strings.Contains(out, "fixed store directory: created "+store) || !strings.Contains(out, "PASS  store directory") {
		t.Errorf("--fix: status %d:\n%s", code, out)
	}
	if st, err := os.Stat(store); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("store after --fix: %v %v", st, err)
	}

	// --fix --json: one document with the fixes.
	os.Remove(store)
	out, _, code = pf(t, tmp, "doctor", "--quick", "--fix", "--json")
	r := doctorJSON(t, out)
	if code != 0 || len(r.Fixes) != 1 || r.Fixes[0].ID != "store.writable" || r.status("store.writable") != "pass" {
		t.Errorf("--fix --json: status %d %s", code, out)
	}
}

func TestDoctorUsage(t *testing.T) {
	for _, args := range [][]string{{"doctor", "--nope"}, {"doctor", "extra"}} {
		if _, errs, code := pf(t, t.TempDir(), args...); code != 125 || !strings.Contains(errs, "PF101") {
			t.Errorf("%v: status %d %q", args, code, errs)
		}
	}
	if out, _, code := pf(t, t.TempDir(), "doctor", "--help"); code != 0 || !strings.Contains(out, "--fix") {
		t.Errorf("--help: %d %q", code, out)
	}
}
