package plan

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/internal/config"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/sandbox"
)

func ptr[T any](v T) *T { return &v }

// testConfig is a pinfold.yaml for an npm project, built by hand.
func testConfig() *config.File {
	pos := func(keys ...string) map[string]config.Pos {
		m := map[string]config.Pos{}
		for i, k := range keys {
			m[k] = config.Pos{Line: 10 + i, Col: 3}
		}
		return m
	}
	return &config.File{
		Path: "/work/app/pinfold.yaml",
		Settings: config.Settings{
			Network: ptr("none"),
			Env:     &config.EnvPolicy{Pass: []string{"LANG", "LC_*"}, Deny: []string{"AWS_*"}, Set: map[string]string{"CI": "1"}, SetOrder: []string{"CI"}},
			Limits:  &config.Limits{Memory: ptr("1g"), TmpSize: ptr("256m")},
			Caches:  []config.Cache{{Name: "npm", Path: "/tmp/.npm"}},
			Secrets: []config.Secret{{Name: "npmrc", File: "~/.npmrc", Env: "NPM_CONFIG_USERCONFIG"}},
			Host:    &config.HostPolicy{Allow: []string{"git status*", "make"}},
			Pos:     pos("network", "env.pass", "env.set", "limits.memory", "limits.tmp_size", "caches", "secrets", "host"),
		},
		Profiles: []config.Profile{
			{Name: "install", Settings: config.Settings{Role: ptr("install"), Network: ptr("host"),
				LockfileFiles: []string{"package-lock.json"}, RequireLockfile: ptr(true),
				PreRun: []config.Hook{{Shell: "test -f package.json"}},
				Limits: &config.Limits{Memory: ptr("4g")}, Pos: pos("role", "network", "lockfile_files", "require_lockfile", "pre_run", "limits.memory")}},
			{Name: "test", Settings: config.Settings{Access: ptr("ro"), Pos: pos("access")}},
			{Name: "tools", Settings: config.Settings{Backend: ptr("host"), Pos: pos("backend")}},
		},
		Dispatch: []config.Rule{
			{Pos: config.Pos{Line: 40}, Command: "npm", Args: []string{"install", "*"}, Profile: "install"},
			{Pos: config.Pos{Line: 42}, Command: "npm", Args: []string{"ci"}, Profile: "install"},
			{Pos: config.Pos{Line: 44}, Match: "npm test*", Profile: "test"},
			{Pos: config.Pos{Line: 46}, Regex: "^(git|make)( |$)", Profile: "tools"},
		},
	}
}

func request(args ...string) *Request {
	host := []string{"LANG=C.UTF-8", "LC_ALL=C", "AWS_SECRET_ACCESS_KEY=s3cr3t", "GITHUB_TOKEN=ghp", "HOME=/home/u",
		"PATH=/usr/bin:/bin", "LD_PRELOAD=/evil.so", "NODE_OPTIONS=--require=/evil.js"}
	m := map[string]string{}
	for _, kv := range host {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return &Request{Args: args, Config: testConfig(), Cwd: "/work/app/src", Home: "/home/u", Store: "/var/lib/pinfold",
		Environ: host, Getenv: env(m), Exists: func(p string) bool { return p == "/work/app/package-lock.json" }}
}

func TestDispatch(t *testing.T) {
	for _, c := range []struct {
		args    []string
		profile string
	}{
		{[]string{"npm", "install"}, "install"},
		{[]string{"npm", "install", "left-pad"}, "install"},
		{[]string{"/usr/bin/npm", "ci"}, "install"},
		{[]string{"npm", "ci", "--verbose"}, ""}, // args must match in number without a trailing *
		{[]string{"npm", "test"}, "test"},
		{[]string{"npm", "test", "--", "-u"}, "test"},
		{[]string{"make"}, "tools"},
		{[]string{"git", "status"}, "tools"},
		{[]string{"gitx"}, ""},
		{[]string{"node", "x.js"}, ""},
	} {
		r := request(c.args...)
		p, err := Resolve(r)
		if err != nil {
			t.Errorf("%v: %v", c.args, err)
			continue
		}
		if p.Audit.Profile != c.profile {
			t.Errorf("%v: profile %q, want %q (rule %s)", c.args, p.Audit.Profile, c.profile, p.Audit.Rule)
		}
	}
}

func TestProfileOverridesTopLevel(t *testing.T) {
	p, err := Resolve(request("npm", "install"))
	if err != nil {
		t.Fatal(err)
	}
	sp := p.Sandbox
	if sp.Network != sandbox.NetworkHost || p.Sources["network"] != "pinfold.yaml:11 (profile install)" {
		t.Errorf("network %s from %s", sp.Network, p.Sources["network"])
	}
	// limits merge field by field: memory from the profile, tmp from the top level.
	if sp.Limits.Memory != 4<<30 || sp.Limits.TmpSize != 256<<20 || p.Sources["limits.tmp_size"] != "pinfold.yaml:14 (top level)" {
		t.Errorf("limits %+v %v", sp.Limits, p.Sources)
	}
	// The workspace is the config's directory; cwd follows into it.
	if sp.Workspace != "/work/app" || p.Command.Dir != "/work/app/src" || p.Sources["workspace"] != "directory of pinfold.yaml" {
		t.Errorf("workspace %s dir %s (%s)", sp.Workspace, p.Command.Dir, p.Sources["workspace"])
	}
	if p.Audit.Role != "install" || p.Audit.Lockfile != "present: package-lock.json" ||
		p.Audit.Rule != "pinfold.yaml:40: command npm args [install, *] -> install" {
		t.Errorf("audit %+v", p.Audit)
	}
	if len(p.Hooks) != 1 || p.Hooks[0].Args[2] != "test -f package.json" {
		t.Errorf("hooks %+v", p.Hooks)
	}
	// Flags beat the profile.
	r := request("npm", "install")
	r.Flags.Network = "none"
	r.Flags.Memory = "2g"
	p, _ = Resolve(r)
	if p.Sandbox.Network != sandbox.NetworkNone || p.Sources["network"] != "flag --network" || p.Sandbox.Limits.Memory != 2<<30 {
		t.Errorf("flags did not win: %s %s %d", p.Sandbox.Network, p.Sources["network"], p.Sandbox.Limits.Memory)
	}
}

func TestEnvPolicy(t *testing.T) {
	r := request("npm", "test")
	r.Flags.Env = []string{"GITHUB_TOKEN", "X=1"}
	p, err := Resolve(r)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]EnvVar{}
	for _, v := range p.Command.Env {
		got[v.Name] = v
	}
	if got["LANG"].Value != "C.UTF-8" || got["LC_ALL"].Value != "C" || got["CI"].Value != "1" || got["X"].Value != "1" {
		t.Errorf("env %+v", got)
	}
	if _, ok := got["AWS_SECRET_ACCESS_KEY"]; ok {
		t.Error("a denied variable was passed")
	}
	if v := got["GITHUB_TOKEN"]; v.Value != "ghp" || !v.Secret {
		t.Errorf("--env NAME of a token: %+v", v)
	}
	if v := got["NPM_CONFIG_USERCONFIG"]; v.Value != "/run/secrets/npmrc" {
		t.Errorf("secret env: %+v", v)
	}
	// --env NAME of a denied variable is refused, not silently dropped.
	r = request("npm", "test")
	r.Flags.Env = []string{"AWS_SECRET_ACCESS_KEY"}
	if _, err := Resolve(r); err == nil {
		t.Error("--env of a denied variable accepted")
	}
}

func TestCachesAndSecrets(t *testing.T) {
	p, err := Resolve(request("npm", "test"))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Caches) != 1 || p.Caches[0].Target != "/tmp/.npm" || !strings.HasPrefix(p.Caches[0].Source, "/var/lib/pinfold/caches/") {
		t.Errorf("caches %+v", p.Caches)
	}
	if len(p.Secrets) != 1 || p.Secrets[0].Source != "/home/u/.npmrc" || p.Secrets[0].Target != "/run/secrets/npmrc" {
		t.Errorf("secrets %+v", p.Secrets)
	}
	var ro, rw int
	for _, m := range p.Sandbox.Mounts {
		if m.ReadOnly {
			ro++
		} else {
			rw++
		}
	}
	if ro != 1 || rw != 1 {
		t.Errorf("mounts %+v", p.Sandbox.Mounts)
	}
	// Another workspace gets other caches.
	r := request("npm", "test")
	r.Config.Path = "/work/other/pinfold.yaml"
	q, _ := Resolve(r)
	if q.Caches[0].Source == p.Caches[0].Source {
		t.Error("two workspaces share a cache")
	}
}

func TestLockfileRequired(t *testing.T) {
	r := request("npm", "install")
	r.Exists = func(string) bool { return false }
	_, err := Resolve(r)
	var fe *fault.Error
	if !errors.As(err, &fe) || fe.Code != fault.LockfileMissing || !strings.Contains(fe.Why, "package-lock.json") {
		t.Errorf("got %v", err)
	}
	// The same command outside the install profile is not refused.
	r = request("npm", "test")
	r.Exists = func(string) bool { return false }
	if _, err := Resolve(r); err != nil {
		t.Errorf("test refused: %v", err)
	}
}

func TestHostMode(t *testing.T) {
	p, err := Resolve(request("git", "status", "--short"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Mode != "host" || p.Backend != "host" {
		t.Fatalf("mode %s backend %s", p.Mode, p.Backend)
	}
	got := map[string]bool{}
	for _, v := range p.Command.Env {
		got[v.Name] = true
	}
	if got["LD_PRELOAD"] || got["NODE_OPTIONS"] || got["AWS_SECRET_ACCESS_KEY"] || !got["PATH"] || !got["HOME"] {
		t.Errorf("host env %v", got)
	}
	_, err = Resolve(request("git", "push"))
	var fe *fault.Error
	if !errors.As(err, &fe) || fe.Code != fault.HostRefused || !strings.Contains(fe.Why, "git status*") {
		t.Errorf("git push on the host: %v", err)
	}
}

func TestGlob(t *testing.T) {
	for _, c := range []struct {
		glob, s string
		want    bool
	}{
		{"npm install*", "npm install", true}, {"npm install*", "npm install x/y z", true},
		{"npm", "npm x", false}, {"*", "", true}, {"LC_*", "LC_ALL", true}, {"LC_*", "LANG", false},
		{"a?c", "abc", true}, {"[ab]x", "bx", true}, {"[!ab]x", "bx", false}, {"[a-c]", "b", true},
		{`a\*`, "a*", true}, {`a\*`, "ab", false}, {"*.go", "x/y.go", true}, {"*a*b", "xxaxxb", true},
	} {
		if got, err := matchGlob(c.glob, c.s); err != nil || got != c.want {
			t.Errorf("matchGlob(%q, %q) = %v, %v", c.glob, c.s, got, err)
		}
	}
	if _, err := matchGlob("[ab", "a"); err == nil {
		t.Error("unterminated class accepted")
	}
}

// BenchmarkLoadAndResolve200 loads a 200-line pinfold.yaml from disk and
// resolves a plan against it: what every `pinfold run` does first.
func BenchmarkLoadAndResolve200(b *testing.B) {
	path := filepath.Join("..", "config", "testdata", "monorepo.yaml")
	r := request("npm", "test")
	for i := 0; i < b.N; i++ {
		f, err := config.Load(path)
		if err != nil {
			b.Fatal(err)
		}
		r.Config = f
		if _, err := Resolve(r); err != nil {
			b.Fatal(err)
		}
	}
}

func TestCheckEnvFlag(t *testing.T) {
	for e, ok := range map[string]bool{"A=1": true, "_x": true, "PATH": true, "A=": true, "A=b=c": true,
		"BAD NAME=1": false, "1X=2": false, "=v": false, "": false, "A-B=1": false} {
		if err := CheckEnvFlag(e); (err == nil) != ok {
			t.Errorf("CheckEnvFlag(%q) = %v, want ok %v", e, err, ok)
		}
	}
}
