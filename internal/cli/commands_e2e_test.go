package cli_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHelpAndCompletion checks the command tree through the real binary:
// help for every command, completion scripts that the shells accept, and
// completions of commands, flags and changeset ids.
func TestHelpAndCompletion(t *testing.T) {
	ws := t.TempDir()
	for _, args := range [][]string{{"--help"}, {"help", "run"}, {"run", "--help"}, {"help", "base", "build"}, {"capability", "list", "--help"}} {
		out, errs, code := pf(t, ws, args...)
		if code != 0 || !strings.Contains(out, "Usage:") {
			t.Errorf("%v: %d %q %q", args, code, out, errs)
		}
	}
	for _, sh := range []string{"bash", "zsh", "fish"} {
		out, _, code := pf(t, ws, "completion", sh)
		if code != 0 || len(out) < 1000 {
			t.Errorf("completion %s: %d, %d bytes", sh, code, len(out))
			continue
		}
		if _, err := exec.LookPath(sh); err == nil && sh == "bash" {
			check := exec.Command(sh, "-n")
			check.Stdin = strings.NewReader(out)
			if b, err := check.CombinedOutput(); err != nil {
				t.Errorf("%s does not parse the script: %v %s", sh, err, b)
			}
		}
	}
	complete := func(args ...string) string {
		out, _, _ := pf(t, ws, append([]string{"__complete"}, args...)...)
		return out
	}
	if out := complete("ap"); !strings.Contains(out, "apply") {
		t.Errorf("command completion: %q", out)
	}
	if out := complete("run", "--netw"); !strings.Contains(out, "--network") {
		t.Errorf("flag completion: %q", out)
	}
	if out := complete("capability", "add", "postg"); !strings.Contains(out, "postgres") {
		t.Errorf("capability completion: %q", out)
	}
	// A changeset's id completes for diff.
	if _, _, code := pf(t, ws, "run", "--", "sh", "-c", "echo x > f"); code != 0 {
		t.Fatal("run")
	}
	out, _, _ := pf(t, ws, "changes", "--json")
	var list []struct{ ID string }
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) == 0 {
		t.Fatalf("changes --json: %q %v", out, err)
	}
	if c := complete("diff", ""); !strings.Contains(c, list[0].ID) {
		t.Errorf("changeset completion lacks %s: %q", list[0].ID, c)
	}
}

// TestUsageErrors checks did-you-mean and refused flags, with PF101 and
// exit status 125.
func TestUsageErrors(t *testing.T) {
	ws := t.TempDir()
	for args, want := range map[string]string{
		"runn -- true":                "did you mean run?",
		"run --netwrok none -- true":  "did you mean --network?",
		"base lss":                    "did you mean ls?",
		"apply --stat":                "unknown flag: --stat",
		"images --all":                "unknown flag: --all",
		"gc --dry-run=maybe":          "invalid argument",
		"capability frob":             "unknown command",
		"diff --exclude":              "needs an argument",
		"run --memory":                "needs an argument",
		"clean extra":                 "takes no arguments",
		"changes --json extra":        "takes no arguments",
		"explain --json --netwrok x":  "did you mean --network?",
		"doctor --workspac /tmp":      "did you mean --workspace?",
		"shim install --dri /tmp/x y": "did you mean --dir?",
	} {
		_, errs, code := pf(t, ws, strings.Fields(args)...)
		if code != 125 || !strings.Contains(errs, "PF101") || !strings.Contains(errs, want) {
			t.Errorf("%s: %d %q, want PF101 and %q", args, code, errs, want)
		}
	}
}

// TestNetworkHelperMissing checks that a run whose network helper cannot
// start fails before the command runs, with PF140 and a fix.
func TestNetworkHelperMissing(t *testing.T) {
	ws := t.TempDir()
	cmd := exec.Command(pinfold, "run", "--access", "ro", "--network", "allow", "--allow", "example.test", "--", "sh", "-c", "echo ran")
	cmd.Dir = ws
	cmd.Env = append(os.Environ(), "PINFOLD_NET_HELPER="+filepath.Join(ws, "no-such-helper"))
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 125 || !strings.Contains(string(out), "PF140") ||
		!strings.Contains(string(out), "PINFOLD_NET_HELPER") || strings.Contains(string(out), "ran") {
		t.Errorf("run with a missing helper: %v %q, want PF140 with a fix and no command run", err, out)
	}
}
