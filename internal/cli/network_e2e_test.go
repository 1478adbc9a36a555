package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestNetworkViolationsReported checks the CLI's side of the network
// policy: the stderr summary with its log, and --json. The names are
// refused by pinfold's DNS server itself, so no resolver is contacted.
func TestNetworkViolationsReported(t *testing.T) {
	ws := t.TempDir()
	store := t.TempDir()
	t.Setenv("PINFOLD_STORE", store)
	_, errs, code := pf(t, ws, "run", "--access", "ro", "--network", "allow", "--allow", "*.example.org",
		"--", "getent", "hosts", "blocked.invalid")
	if code != 2 { // getent: not found
		t.Fatalf("run: exit %d, want getent's 2; stderr %q", code, errs)
	}
	m := regexp.MustCompile(`blocked \d+ attempts? \(log: (\S+)\):\n\s+dns\s+blocked\.invalid: not in the allow list`).FindStringSubmatch(errs)
	if m == nil {
		t.Fatalf("no violation summary in %q", errs)
	}
	log, err := os.ReadFile(m[1])
	if err != nil || !strings.HasPrefix(m[1], filepath.Join(store, "runs")) {
		t.Fatalf("log %s: %v", m[1], err)
	}
	var v struct{ Kind, Name, Reason string }
	if err := json.Unmarshal([]byte(strings.SplitN(string(log), "\n", 2)[0]), &v); err != nil || v.Kind != "dns" || v.Name != "blocked.invalid" {
		t.Errorf("log line %q: %v", log, err)
	}

	out, _, _ := pf(t, ws, "run", "--json", "--access", "ro", "--network", "allow", "--allow", "example.org",
		"--deny", "*.invalid", "--", "getent", "hosts", "x.invalid")
	var res struct {
		Violations []struct{ Kind, Name, Rule string } `json:"violations"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("json %q: %v", out, err)
	}
	if len(res.Violations) == 0 || res.Violations[0].Name != "x.invalid" || res.Violations[0].Rule != "*.invalid" {
		t.Errorf("json violations: %+v", res.Violations)
	}
}

func TestNetworkFlagsChecked(t *testing.T) {
	ws := t.TempDir()
	for _, args := range [][]string{
		{"--network", "allow"}, // needs an entry
		{"--network", "allow", "--allow", "https://example.org/x"},
		{"--network", "host", "-p", "8080:80"},
		{"--network", "outbound", "-p", "80"},
		{"--network", "outbound", "--dns", "resolver"},
	} {
		_, errs, code := pf(t, ws, append(append([]string{"run", "--access", "ro"}, args...), "--", "true")...)
		if code != 125 || !strings.Contains(errs, "PF102") {
			t.Errorf("%v: exit %d, stderr %q; want a usage error", args, code, errs)
		}
	}
	// An allow list alone means --network allow.
	out, _, code := pf(t, ws, "plan", "--access", "ro", "--allow", "*.example.org", "--host-loopback", "--", "true")
	if code != 0 || !strings.Contains(out, "network:    allow") || !strings.Contains(out, "allow:    *.example.org") || !strings.Contains(out, "host loopback") {
		t.Errorf("plan: %d %q", code, out)
	}
}
