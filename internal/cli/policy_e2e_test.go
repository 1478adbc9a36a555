package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// project makes a workspace holding pinfold.yaml and returns its path.
func project(t *testing.T, yaml string) string {
	t.Helper()
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "pinfold.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return ws
}

const policy = `version: 1
network: none
env:
  pass: [PINFOLD_PASS_*]
  deny: [PINFOLD_DENY_*]
  set:
    FROM_CONFIG: "yes"
caches:
  - name: tool
    path: /tmp/.tool-cache
secrets:
  - name: token
    file: secret.txt
    env: TOKEN_FILE
host:
  allow: ["echo host*"]
profiles:
  install:
    role: install
    access: rw
    lockfile_files: [tool.lock]
    require_lockfile: true
  check:
    access: ro
    pre_run:
      - test -f ready
  onhost:
    backend: host
dispatch:
  - command: sh
    args: [-c, "*install*"]
    profile: install
  - match: "sh -c *check*"
    profile: check
  - command: echo
    profile: onhost
`

func TestPlanShowsTheDecision(t *testing.T) {
	ws := project(t, policy)
	os.WriteFile(filepath.Join(ws, "secret.txt"), []byte("TOP-SECRET-VALUE"), 0o600)
	os.WriteFile(filepath.Join(ws, "tool.lock"), nil, 0o644)
	out, errs, code := pf(t, ws, "plan", "--json", "--", "sh", "-c", "tool install")
	if code != 0 {
		t.Fatalf("plan: %d %s", code, errs)
	}
	var p struct {
		Access string `json:"access"`
		Audit  struct {
			Profile, Rule, Role, Lockfile string
		} `json:"audit"`
		Sources map[string]string `json:"sources"`
		Secrets []struct{ Target string }
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err, out)
	}
	if p.Audit.Profile != "install" || p.Audit.Role != "install" || p.Audit.Lockfile != "present: tool.lock" ||
		!strings.HasPrefix(p.Audit.Rule, "pinfold.yaml:") || !strings.HasPrefix(p.Sources["access"], "pinfold.yaml:") ||
		len(p.Secrets) != 1 {
		t.Errorf("plan %+v", p)
	}
	text, _, _ := pf(t, ws, "plan", "--", "sh", "-c", "tool install")
	if strings.Contains(text+out, "TOP-SECRET-VALUE") {
		t.Error("a secret's value was printed")
	}
	for _, want := range []string{"profile:  install", "network:    none", "cache tool:", "secret token:"} {
		if !strings.Contains(text, want) {
			t.Errorf("plan text lacks %q:\n%s", want, text)
		}
	}
}

func TestPolicyAppliesToRuns(t *testing.T) {
	ws := project(t, policy)
	os.WriteFile(filepath.Join(ws, "secret.txt"), []byte("TOP-SECRET-VALUE"), 0o600)
	t.Setenv("PINFOLD_PASS_ME", "passed")
	t.Setenv("PINFOLD_DENY_ME", "leaked")
	// No lockfile: the install profile refuses.
	_, errs, code := pf(t, ws, "run", "--", "sh", "-c", "tool install")
	if code != 125 || !strings.Contains(errs, "PF172") {
		t.Errorf("install without lockfile: %d %s", code, errs)
	}
	os.WriteFile(filepath.Join(ws, "tool.lock"), nil, 0o644)
	out, errs, code := pf(t, ws, "run", "--", "sh", "-c",
		`echo install; echo "$PINFOLD_PASS_ME/$PINFOLD_DENY_ME/$FROM_CONFIG"; cat "$TOKEN_FILE"; echo; echo one > /tmp/.tool-cache/x; touch made`)
	if code != 0 || out != "install\npassed//yes\nTOP-SECRET-VALUE\n" {
		t.Errorf("install run: %d %q %q", code, out, errs)
	}
	if _, err := os.Stat(filepath.Join(ws, "made")); err != nil {
		t.Error("the install profile could not write the workspace")
	}
	// The cache survives into the next run; the secret stays read-only.
	out, _, code = pf(t, ws, "run", "--", "sh", "-c", `cat /tmp/.tool-cache/x; echo x > "$TOKEN_FILE" 2>/dev/null || echo ro`)
	if code != 0 || out != "one\nro\n" {
		t.Errorf("second run: %d %q", code, out)
	}
	// check: read-only workspace, and a pre_run hook that fails aborts.
	_, errs, code = pf(t, ws, "run", "--", "sh", "-c", "check; touch x")
	if code != 125 || !strings.Contains(errs, "PF173") {
		t.Errorf("failing hook: %d %s", code, errs)
	}
	os.WriteFile(filepath.Join(ws, "ready"), nil, 0o644)
	_, errs, code = pf(t, ws, "run", "--", "sh", "-c", "check; touch x")
	if code == 0 || !strings.Contains(errs, "Read-only") {
		t.Errorf("check profile wrote the workspace: %d %s", code, errs)
	}
}

func TestHostBackend(t *testing.T) {
	ws := project(t, policy)
	out, errs, code := pf(t, ws, "run", "--", "echo", "host", "ok")
	if code != 0 || out != "host ok\n" || !strings.Contains(errs, "running on the host") {
		t.Errorf("allowed host command: %d %q %q", code, out, errs)
	}
	_, errs, code = pf(t, ws, "run", "--", "echo", "other")
	if code != 125 || !strings.Contains(errs, "PF174") || !strings.Contains(errs, "echo host*") {
		t.Errorf("refused host command: %d %q", code, errs)
	}
}

func TestConfigErrors(t *testing.T) {
	ws := project(t, "version: 1\nprofiles:\n  test:\n    netwrok: none\n")
	_, errs, code := pf(t, ws, "run", "--", "true")
	if code != 125 || !strings.Contains(errs, "PF170") || !strings.Contains(errs, "pinfold.yaml:4:5") ||
		!strings.Contains(errs, "netwrok") {
		t.Errorf("bad key: %d %s", code, errs)
	}
	// --config points elsewhere; a config in a parent directory is found.
	sub := filepath.Join(ws, "sub")
	os.Mkdir(sub, 0o755)
	good := project(t, "version: 1\nhostname: from-config\n")
	out, errs, code := pf(t, sub, "run", "--config", filepath.Join(good, "pinfold.yaml"), "--", "hostname")
	if code != 0 || out != "from-config\n" {
		t.Errorf("--config: %d %q %q", code, out, errs)
	}
	nested := project(t, "version: 1\nhostname: found-up\n")
	deep := filepath.Join(nested, "a", "b")
	os.MkdirAll(deep, 0o755)
	out, errs, code = pf(t, deep, "run", "--", "sh", "-c", "hostname; pwd")
	if code != 0 || out != "found-up\n"+deep+"\n" {
		t.Errorf("walking up: %d %q %q", code, out, errs)
	}
}

// TestHostBackendLimits: limits a host run cannot enforce are refused with
// PF143 whether they come from a flag or from pinfold.yaml (top level or
// the profile), before any hook runs, and pinfold plan says so; the
// timeout, which the host enforces, applies.
func TestHostBackendLimits(t *testing.T) {
	cfg := func(top, prof string) string {
		return "version: 1\n" + top + `profiles:
  onhost:
    backend: host
    pre_run: [touch hook-ran]
    host:
      allow: ["echo *", "sleep *"]
` + prof + `dispatch:
  - command: echo
    profile: onhost
  - command: sleep
    profile: onhost
`
	}
	for _, c := range []struct {
		name, top, prof string
		flags           []string
		want            string
	}{
		{"top level", "limits: {memory: 256m}\n", "", nil, "memory 256MiB (pinfold.yaml:2 (top level))"},
		{"profile", "", "    limits: {pids: 50}\n", nil, "pids 50 (pinfold.yaml:8 (profile onhost))"},
		{"flag", "", "", []string{"--cpus", "0.5"}, "cpus 0.5 (flag --cpus)"},
	} {
		ws := project(t, cfg(c.top, c.prof))
		args := append(append([]string{"run"}, c.flags...), "--", "echo", "hi")
		out, errs, code := pf(t, ws, args...)
		if code != 125 || out != "" || !strings.Contains(errs, "PF143") || !strings.Contains(errs, c.want) {
			t.Errorf("%s: run: %d %q %q", c.name, code, out, errs)
		}
		// Refused first: nothing else is said.
		if strings.Contains(errs, "running on the host") {
			t.Errorf("%s: a refused host run said it runs on the host: %q", c.name, errs)
		}
		if _, err := os.Stat(filepath.Join(ws, "hook-ran")); err == nil {
			t.Errorf("%s: the pre_run hook ran for a refused plan", c.name)
		}
		args[0] = "plan"
		out, _, _ = pf(t, ws, args...)
		if !strings.Contains(out, c.want+": the host cannot enforce it") {
			t.Errorf("%s: plan does not say the limit is refused:\n%s", c.name, out)
		}
		args = append([]string{"plan", "--json"}, args[1:]...)
		out, _, _ = pf(t, ws, args...)
		var pj struct {
			Unenforced []string `json:"host_unenforced"`
		}
		if err := json.Unmarshal([]byte(out), &pj); err != nil || len(pj.Unenforced) != 1 || pj.Unenforced[0] != c.want {
			t.Errorf("%s: plan --json: %v %+v", c.name, err, pj)
		}
	}
	// The timeout is the host's to enforce.
	ws := project(t, cfg("limits: {timeout: 1s}\n", ""))
	if _, errs, code := pf(t, ws, "run", "--", "sleep", "10"); code != 124 {
		t.Errorf("timeout on the host: %d %q", code, errs)
	}
}

// plan shows a plan the policy would refuse, and says so; only run refuses.
func TestPlanShowsARefusedInstall(t *testing.T) {
	ws := project(t, policy)
	os.WriteFile(filepath.Join(ws, "secret.txt"), []byte("x"), 0o600)
	text, errs, code := pf(t, ws, "plan", "--", "sh", "-c", "tool install")
	if code != 0 || !strings.Contains(text, "profile:  install") || !strings.Contains(text, "run would refuse this plan: PF172") {
		t.Errorf("plan: %d\n%s%s", code, text, errs)
	}
	// The Fix names no package manager the profile's lockfiles are not of.
	if strings.Contains(text, "npm") {
		t.Errorf("the Fix of a tool.lock profile names npm:\n%s", text)
	}
	out, _, code := pf(t, ws, "plan", "--json", "--", "sh", "-c", "tool install")
	var p struct{ Refused string }
	if err := json.Unmarshal([]byte(out), &p); err != nil || code != 0 || !strings.HasPrefix(p.Refused, "PF172 ") {
		t.Errorf("plan --json: %d %v %q", code, err, out)
	}
	if _, errs, code := pf(t, ws, "run", "--", "sh", "-c", "tool install"); code != 125 || !strings.Contains(errs, "PF172") {
		t.Errorf("run: %d %s", code, errs)
	}
}

// pinfold plan says the native runtime's layers, Landlock's with its ABI
// or why there is none.
func TestPlanShowsTheLayers(t *testing.T) {
	ws := t.TempDir()
	text, errs, code := pf(t, ws, "plan", "--", "true")
	if code != 0 {
		t.Fatalf("plan: %d %s", code, errs)
	}
	if !strings.Contains(text, "  layers: namespaces, seccomp, ") || !strings.Contains(text, "landlock") {
		t.Errorf("plan text lacks the layers:\n%s", text)
	}
	t.Setenv("PINFOLD_LANDLOCK", "0")
	out, _, _ := pf(t, ws, "plan", "--json", "--", "true")
	var p struct{ Layers []string }
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err, out)
	}
	if len(p.Layers) != 3 || p.Layers[2] != "no landlock (PINFOLD_LANDLOCK=0)" {
		t.Errorf("layers with PINFOLD_LANDLOCK=0: %q", p.Layers)
	}
}
