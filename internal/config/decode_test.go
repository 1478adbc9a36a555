package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const everyKey = `version: 1
backend: native
base: dir:./rootfs
access: ro
workspace: ~/src/app
workdir: /work
network: none
user: root
hostname: box-1.local
mounts:
  - ./data:/data:ro
  - /srv/x:/x
  - {source: ~/.gitconfig, target: /tmp/.gitconfig, readonly: true}
cap_add: [NET_RAW, CAP_NET_BIND_SERVICE]
env:
  pass: [LANG, "LC_*"]
  set:
    A: "1"
    B: two words
    C: ""
  deny: ["*TOKEN*"]
caches:
  - name: npm
    path: /tmp/.npm
secrets:
  - name: npmrc
    file: ~/.npmrc
    path: /tmp/.npmrc
    env: NPM_CONFIG_USERCONFIG
  - {name: token, file: /etc/token}
limits:
  memory: 2g
  pids: 512
  cpus: 1.5
  timeout: 10m
  tmp_size: 256m
role: run
lockfile_files: [package-lock.json]
require_lockfile: false
pre_run:
  - echo hi
  - [git, fetch, --quiet]
host:
  allow: ["make *", "git status"]
  block_env: [SSH_AUTH_SOCK]
profiles:
  install:
    role: install
    network: host
    require_lockfile: true
    pre_run: ./check.sh
    limits: {timeout: 90}
  quiet: {}
dispatch:
  - match: "npm install*"
    profile: install
  - command: npm
    args: [ci, "*"]
    profile: install
  - regex: '^make( |$)'
    profile: quiet
`

func ptr[T any](v T) *T { return &v }

func TestDecodeEveryKey(t *testing.T) {
	f, err := Parse("pinfold.yaml", []byte(everyKey))
	if err != nil {
		t.Fatal(err)
	}
	s := f.Settings
	want := Settings{
		Backend: ptr("native"), Base: ptr("dir:./rootfs"), Access: ptr("ro"), Workspace: ptr("~/src/app"),
		Workdir: ptr("/work"), Network: ptr("none"), User: ptr("root"), Hostname: ptr("box-1.local"),
		Mounts: []Mount{
			{Pos: Pos{11, 5}, Source: "./data", Target: "/data", ReadOnly: true},
			{Pos: Pos{12, 5}, Source: "/srv/x", Target: "/x"},
			{Pos: Pos{13, 5}, Source: "~/.gitconfig", Target: "/tmp/.gitconfig", ReadOnly: true},
		},
		CapAdd: []string{"NET_RAW", "CAP_NET_BIND_SERVICE"},
		Env: &EnvPolicy{Pos: Pos{15, 1}, Pass: []string{"LANG", "LC_*"}, Deny: []string{"*TOKEN*"},
			Set: map[string]string{"A": "1", "B": "two words", "C": ""}, SetOrder: []string{"A", "B", "C"}},
		Caches: []Cache{{Pos: Pos{23, 5}, Name: "npm", Path: "/tmp/.npm"}},
		Secrets: []Secret{
			{Pos: Pos{26, 5}, Name: "npmrc", File: "~/.npmrc", Path: "/tmp/.npmrc", Env: "NPM_CONFIG_USERCONFIG"},
			{Pos: Pos{30, 5}, Name: "token", File: "/etc/token"},
		},
		Limits: &Limits{Pos: Pos{31, 1}, Memory: ptr("2g"), Pids: ptr(int64(512)), CPUs: ptr(1.5),
			Timeout: ptr("10m"), TmpSize: ptr("256m")},
		Role: ptr("run"), LockfileFiles: []string{"package-lock.json"}, RequireLockfile: ptr(false),
		PreRun: []Hook{{Pos: Pos{41, 5}, Shell: "echo hi"}, {Pos: Pos{42, 5}, Args: []string{"git", "fetch", "--quiet"}}},
		Host:   &HostPolicy{Pos: Pos{43, 1}, Allow: []string{"make *", "git status"}, BlockEnv: []string{"SSH_AUTH_SOCK"}},
	}
	wantPos := map[string]Pos{
		"backend": {2, 1}, "base": {3, 1}, "access": {4, 1}, "workspace": {5, 1}, "workdir": {6, 1},
		"network": {7, 1}, "user": {8, 1}, "hostname": {9, 1}, "mounts": {10, 1}, "cap_add": {14, 1},
		"env": {15, 1}, "env.pass": {16, 3}, "env.set": {17, 3}, "env.set.A": {18, 5}, "env.set.B": {19, 5},
		"env.set.C": {20, 5}, "env.deny": {21, 3}, "caches": {22, 1}, "secrets": {25, 1}, "limits": {31, 1},
		"limits.memory": {32, 3}, "limits.pids": {33, 3}, "limits.cpus": {34, 3}, "limits.timeout": {35, 3},
		"limits.tmp_size": {36, 3}, "role": {37, 1}, "lockfile_files": {38, 1}, "require_lockfile": {39, 1},
		"pre_run": {40, 1}, "host": {43, 1}, "host.allow": {44, 3}, "host.block_env": {45, 3},
	}
	want.Pos = wantPos
	if !reflect.DeepEqual(s, want) {
		t.Errorf("settings:\n got %s\nwant %s", show(s), show(want))
	}
	if f.Version != 1 || f.Path != "pinfold.yaml" {
		t.Errorf("version %d path %q", f.Version, f.Path)
	}
	if len(f.Profiles) != 2 || f.Profiles[0].Name != "install" || f.Profiles[0].Pos != (Pos{47, 3}) ||
		f.Profiles[1].Name != "quiet" || f.Profiles[1].Pos != (Pos{53, 3}) {
		t.Fatalf("profiles %+v", f.Profiles)
	}
	in := f.Profiles[0].Settings
	if *in.Role != "install" || *in.Network != "host" || !*in.RequireLockfile ||
		!reflect.DeepEqual(in.PreRun, []Hook{{Pos: Pos{51, 14}, Shell: "./check.sh"}}) ||
		*in.Limits.Timeout != "90" || in.Limits.Pos != (Pos{52, 5}) || in.Pos["limits.timeout"] != (Pos{52, 14}) ||
		in.Pos["network"] != (Pos{49, 5}) {
		t.Errorf("install profile %s", show(in))
	}
	if q := f.Profiles[1].Settings; !reflect.DeepEqual(q, Settings{}) {
		t.Errorf("quiet profile %s", show(q))
	}
	wantRules := []Rule{
		{Pos: Pos{55, 5}, Match: "npm install*", Profile: "install"},
		{Pos: Pos{57, 5}, Command: "npm", Args: []string{"ci", "*"}, Profile: "install"},
		{Pos: Pos{60, 5}, Regex: "^make( |$)", Profile: "quiet"},
	}
	re, err := f.Dispatch[2].CompiledRegex()
	if err != nil || re == nil || !re.MatchString("make all") {
		t.Errorf("rule 3 regex %v, %v", re, err)
	}
	copied := f.Dispatch[2] // copies share the compiled regex
	if again, err := copied.CompiledRegex(); again != re || err != nil {
		t.Errorf("rule 3 compiled twice: %p %p %v", re, again, err)
	}
	if re, err := f.Dispatch[0].CompiledRegex(); re != nil || err != nil {
		t.Errorf("rule 1 regex %v, %v", re, err)
	}
	if re, err := (&Rule{Regex: "^a+$"}).CompiledRegex(); err != nil || !re.MatchString("aa") {
		t.Errorf("hand-made rule regex %v, %v", re, err)
	}
	f.Dispatch[2].re = nil
	if !reflect.DeepEqual(f.Dispatch, wantRules) {
		t.Errorf("dispatch\n got %+v\nwant %+v", f.Dispatch, wantRules)
	}
}

// show prints settings with pointers followed.
func show(s Settings) string {
	var b strings.Builder
	v := reflect.ValueOf(s)
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		if f.Kind() == reflect.Pointer && !f.IsNil() {
			f = f.Elem()
		}
		fmt.Fprintf(&b, "%s=%+v ", v.Type().Field(i).Name, f.Interface())
	}
	return b.String()
}

func TestDecodeErrors(t *testing.T) {
	const v = "version: 1\n"
	for _, c := range []struct {
		name, in, want string
	}{
		{"empty", "", `1:1: the file is empty; it starts with "version: 1"`},
		{"not a mapping", "- a\n", `1:1: the file must be a mapping of keys (version: 1, profiles:, ...)`},
		{"no version", "network: none\n", `1:1: missing "version: 1" (the format version) at the top level`},
		{"version 2", "version: 2\n", `1:10: unsupported version 2: this pinfold reads version 1`},
		{"version quoted", "version: \"1\"\n", `1:10: version must be a whole number, not "1"`},
		{"version float", "version: 1.0\n", `1:10: version must be a whole number, not "1.0"`},
		{"unknown top key", v + "netwrok: none\n", `2:1: unknown key "netwrok" at the top level (did you mean "network"?)`},
		{"unknown key far", v + "colour: red\n", `2:1: unknown key "colour" at the top level`},
		{"unknown profile key", v + "profiles:\n  install:\n    netwrok: host\n", `4:5: unknown key "netwrok" in profile "install" (did you mean "network"?)`},
		{"workspace in profile", v + "profiles:\n  a:\n    workspace: /x\n", `4:5: workspace cannot be set in a profile (profile "a"): the workspace is chosen for the whole file; set it at the top level`},
		{"dispatch in profile", v + "profiles:\n  a:\n    dispatch: []\n", `4:5: "dispatch" belongs at the top level, not in profile "a"`},
		{"backend", v + "backend: kvm\n", `2:10: invalid backend "kvm"; allowed: native, gvisor, podman, docker, kubernetes, host, auto`},
		{"backend typo", v + "backend: nativ\n", `2:10: invalid backend "nativ" (did you mean "native"?); allowed: native, gvisor, podman, docker, kubernetes, host, auto`},
		{"base", v + "base: debian\n", `2:7: invalid base "debian": use host, debian-12, dir:PATH, tar:PATH or oci:PATH`},
		{"base no path", v + "base: \"tar:\"\n", `2:7: invalid base "tar:": tar: needs a path, like tar:./rootfs`},
		{"access", v + "access: write\n", `2:9: invalid access "write"; allowed: changeset, rw, ro, none`},
		{"network", v + "network: hots\n", `2:10: invalid network "hots" (did you mean "host"?); allowed: none, host, outbound, allow`},
		{"network bool", v + "network: no\n", `2:10: invalid network "no" (did you mean "none"?); allowed: none, host, outbound, allow`},
		{"network list", v + "network: [host]\n", `2:10: network must be a single value, not a list`},
		{"network null", v + "network:\n", `2:9: network has no value`},
		{"network tilde", v + "network: ~\n", `2:10: network: ~ means "no value" in YAML; leave the key out, or quote it if you mean the text`},
		{"workdir relative", v + "workdir: src\n", `2:10: invalid workdir "src": it must be an absolute path inside the sandbox`},
		{"workspace empty", v + "workspace: \"\"\n", `2:12: invalid workspace "": it is empty`},
		{"workspace tilde user", v + "workspace: ~bob/x\n", `2:12: invalid workspace "~bob/x": only ~/ (your home) is understood, not ~user`},
		{"user", v + "user: nobody\n", `2:7: invalid user "nobody": use root, or "" for your own user`},
		{"hostname", v + "hostname: my_box\n", `2:11: invalid hostname "my_box": use 1 to 64 letters, digits, '-' and '.'`},
		{"hostname long", v + "hostname: " + strings.Repeat("a", 65) + "\n", `2:11: invalid hostname "` + strings.Repeat("a", 65) + `": use 1 to 64 letters, digits, '-' and '.'`},
		{"mounts scalar", v + "mounts: /a:/b\n", `2:9: mounts must be a list, not a single value`},
		{"mount form", v + "mounts: [/a]\n", `2:10: invalid mount "/a": use SRC:DST, SRC:DST:ro or SRC:DST:rw (or source:, target:, readonly:)`},
		{"mount mode", v + "mounts: [\"/a:/b:rx\"]\n", `2:10: invalid mount "/a:/b:rx": use SRC:DST, SRC:DST:ro or SRC:DST:rw (or source:, target:, readonly:)`},
		{"mount relative target", v + "mounts: [/a:b]\n", `2:10: invalid mount "/a:b": target: it must be an absolute path inside the sandbox`},
		{"mount root target", v + "mounts: [/a:/]\n", `2:10: invalid mount "/a:/": target: nothing can be mounted on / itself`},
		{"mount empty source", v + "mounts: [\":/b\"]\n", `2:10: invalid mount ":/b": source: it is empty`},
		{"mount map unknown", v + "mounts:\n  - {source: /a, target: /b, mode: ro}\n", `3:30: unknown key "mode" in a mount`},
		{"mount map missing", v + "mounts:\n  - {source: /a}\n", `3:5: a mount needs a source and a target`},
		{"mount readonly", v + "mounts:\n  - {source: /a, target: /b, readonly: yes}\n", `3:40: readonly must be true or false, not "yes"`},
		{"capability lower case", v + "cap_add: [net_raw]\n", `2:11: invalid cap_add item "net_raw": not a Linux capability (did you mean NET_RAW?); names look like NET_RAW or CAP_NET_RAW`},
		{"memory exponent", v + "limits:\n  memory: 1e9\n", `3:11: invalid limits.memory "1e9": use a size of at least 4m, like 512m or 2g`},
		{"memory spaces", v + "limits:\n  memory: 1 g\n", `3:11: invalid limits.memory "1 g": use a size of at least 4m, like 512m or 2g`},
		{"timeout negative", v + "limits:\n  timeout: -5m\n", `3:12: invalid limits.timeout "-5m": use a duration like 30s, 5m or 1h30m, or a number of seconds`},
		{"timeout inf", v + "limits:\n  timeout: inf\n", `3:12: invalid limits.timeout "inf": use a duration like 30s, 5m or 1h30m, or a number of seconds`},
		{"capability", v + "cap_add: [NET_RWA]\n", `2:11: invalid cap_add item "NET_RWA": not a Linux capability (did you mean NET_RAW?); names look like NET_RAW or CAP_NET_RAW`},
		{"env scalar", v + "env: LANG\n", `2:6: env must be a mapping (pass:, set:, deny:), not a single value`},
		{"env unknown", v + "env:\n  allow: [A]\n", `3:3: unknown key "allow" in env`},
		{"env unknown in profile", v + "profiles:\n  p:\n    env: {pas: [A]}\n", `4:11: unknown key "pas" in env of profile "p" (did you mean "pass"?)`},
		{"env pass glob", v + "env:\n  pass: [\"LC_[\"]\n", `3:10: invalid env.pass item "LC_[": a [ class is not closed with ]`},
		{"env pass equals", v + "env:\n  pass: [A=1]\n", `3:10: invalid env.pass item "A=1": variable names cannot hold '=' or NUL`},
		{"env set name", v + "env:\n  set:\n    1A: x\n", `4:5: invalid variable name "1A": use letters, digits and '_', not starting with a digit`},
		{"env set null", v + "env:\n  set:\n    A:\n", `4:7: env.set.A has no value; write "" for an empty one`},
		{"env set list", v + "env:\n  set:\n    A: [1]\n", `4:8: env.set.A must be a single value, not a list`},
		{"env set not mapping", v + "env:\n  set: [A=1]\n", `3:8: env.set must be a mapping of variable names to values, not a list`},
		{"caches not list", v + "caches: {name: a, path: /a}\n", `2:9: caches must be a list of {name, path}, not a mapping`},
		{"cache scalar", v + "caches: [npm]\n", `2:10: a cache is a mapping: {name: NAME, path: /PATH}`},
		{"cache name", v + "caches:\n  - {name: Npm, path: /a}\n", `3:12: invalid cache name "Npm": use lower-case letters, digits, '.', '_' and '-', starting with a letter or digit (at most 64)`},
		{"cache dotdot", v + "caches:\n  - {name: .., path: /a}\n", `3:12: invalid cache name "..": use lower-case letters, digits, '.', '_' and '-', starting with a letter or digit (at most 64)`},
		{"cache path", v + "caches:\n  - {name: a, path: .npm}\n", `3:21: invalid cache path ".npm": it must be an absolute path inside the sandbox`},
		{"cache missing path", v + "caches:\n  - name: a\n", `3:5: a cache needs a name and a path`},
		{"cache unknown", v + "caches:\n  - {name: a, path: /a, size: 1g}\n", `3:25: unknown key "size" in a cache`},
		{"cache duplicate", v + "caches:\n  - {name: a, path: /a}\n  - {name: a, path: /b}\n", `4:12: duplicate cache name "a" (first at line 3)`},
		{"cache same path", v + "caches:\n  - {name: a, path: /a}\n  - {name: b, path: /a/}\n", `4:21: cache "b" uses the path of cache "a" (line 3)`},
		{"secret missing file", v + "secrets:\n  - name: a\n", `3:5: a secret needs a name and a file`},
		{"secret env", v + "secrets:\n  - {name: a, file: /a, env: A-B}\n", `3:30: invalid secret env "A-B": use letters, digits and '_', not starting with a digit`},
		{"secret duplicate", v + "secrets:\n  - {name: a, file: /a}\n  - {name: a, file: /b}\n", `4:12: duplicate secret name "a" (first at line 3)`},
		{"secret default path taken", v + "secrets:\n  - {name: a, file: /a, path: /run/secrets/b}\n  - {name: b, file: /b}\n", `4:5: secret "b" uses the path of secret "a" (line 3)`},
		{"mount unknown in profile", v + "profiles:\n  p:\n    mounts: [{source: /a, target: /b, ro: true}]\n", `4:39: unknown key "ro" in a mount of profile "p"`},
		{"secret same path", v + "secrets:\n  - {name: a, file: /a}\n  - {name: b, file: /b, path: /run/secrets/a}\n", `4:31: secret "b" uses the path of secret "a" (line 3)`},
		{"limits unknown", v + "limits:\n  memroy: 1g\n", `3:3: unknown key "memroy" in limits (did you mean "memory"?)`},
		{"memory", v + "limits:\n  memory: lots\n", `3:11: invalid limits.memory "lots": use a size of at least 4m, like 512m or 2g`},
		{"memory small", v + "limits:\n  memory: 1m\n", `3:11: invalid limits.memory "1m": use a size of at least 4m, like 512m or 2g`},
		{"tmp_size", v + "limits:\n  tmp_size: 10k\n", `3:13: invalid limits.tmp_size "10k": use a size of at least 1m, like 512m or 2g`},
		{"pids zero", v + "limits:\n  pids: 0\n", `3:9: limits.pids must be at least 2 (the sandbox's init and the command)`},
		{"pids word", v + "limits:\n  pids: many\n", `3:9: limits.pids must be a whole number, not "many"`},
		{"pids hex", v + "limits:\n  pids: 0x10\n", `3:9: limits.pids must be a whole number, not "0x10"`},
		{"pids huge", v + "limits:\n  pids: 99999999999999999999\n", `3:9: limits.pids: 99999999999999999999 is too large`},
		{"cpus zero", v + "limits:\n  cpus: 0\n", `3:9: limits.cpus must be at least 0.01`},
		{"deny tcp:", v + "deny: [\"tcp:x.example.org\"]\n", `2:8: invalid deny item "tcp:x.example.org": rule "tcp:x.example.org": "tcp:" is for allow entries; a deny entry refuses every protocol`},
		{"allow tcp: address", v + "allow: [\"tcp:10.0.0.0/8\"]\n", `2:9: invalid allow item "tcp:10.0.0.0/8": rule "tcp:10.0.0.0/8": "tcp:" applies to names only (an address or CIDR entry is not name-checked); give "10.0.0.0/8"`},
		{"allow without a list", v + "profiles:\n  inst: {network: allow}\n", `3:10: network: allow lets out only what allow lists, and no allow list is given; add allow: [registry.example.org, ...], or use network: outbound`},
		{"ports with host", v + "ports: [\"8080:80\"]\nprofiles:\n  web: {network: host}\n", `4:9: network: host has the host's ports already; ports forward into a sandbox's own network (none, outbound or allow)`},
		{"cpus exp", v + "limits:\n  cpus: 1e3\n", `3:9: limits.cpus must be a number like 2 or 0.5, not "1e3"`},
		{"cpus quoted", v + "limits:\n  cpus: \"2\"\n", `3:9: limits.cpus must be a number like 2 or 0.5, not "2"`},
		{"timeout", v + "limits:\n  timeout: soon\n", `3:12: invalid limits.timeout "soon": use a duration like 30s, 5m or 1h30m, or a number of seconds`},
		{"timeout zero", v + "limits:\n  timeout: 0s\n", `3:12: invalid limits.timeout "0s": use a duration like 30s, 5m or 1h30m, or a number of seconds`},
		{"role", v + "role: deploy\n", `2:7: invalid role "deploy"; allowed: install, run, build`},
		{"lockfile absolute", v + "lockfile_files: [/x.lock]\n", `2:18: invalid lockfile_files item "/x.lock": it must be relative to the workspace`},
		{"lockfile outside", v + "lockfile_files: [../x.lock]\n", `2:18: invalid lockfile_files item "../x.lock": it must be inside the workspace`},
		{"require_lockfile yes", v + "require_lockfile: yes\n", `2:19: require_lockfile must be true or false, not "yes"`},
		{"require_lockfile quoted", v + "require_lockfile: \"true\"\n", `2:19: require_lockfile must be true or false, not "true"`},
		{"require without files", v + "require_lockfile: true\n", `2:1: require_lockfile is true but no lockfile_files are listed`},
		{"require without files in profile", v + "profiles:\n  i:\n    require_lockfile: true\n", `4:5: require_lockfile is true but no lockfile_files are listed`},
		{"pre_run empty", v + "pre_run: \"\"\n", `2:10: pre_run is an empty command`},
		{"pre_run empty list item", v + "pre_run: [[]]\n", `2:11: pre_run has an empty command`},
		{"pre_run mapping", v + "pre_run: {cmd: x}\n", `2:10: pre_run must be a command, or a list of commands, not a mapping`},
		{"host unknown", v + "host:\n  deny: [x]\n", `3:3: unknown key "deny" in host`},
		{"host allow glob", v + "host:\n  allow: [\"make [\"]\n", `3:11: invalid host.allow item "make [": a [ class is not closed with ]`},
		{"profiles list", v + "profiles: [a]\n", `2:11: profiles must be a mapping of profile names to settings, not a list`},
		{"profile name", v + "profiles:\n  \"a b\": {}\n", `3:3: invalid profile name "a b": use letters, digits, '.', '_' and '-'`},
		{"profile null", v + "profiles:\n  a:\n", `3:5: profile "a" has no settings; write "a: {}" for a profile that changes nothing`},
		{"profile scalar", v + "profiles:\n  a: b\n", `3:6: profile "a" must be a mapping of settings`},
		{"dispatch mapping", v + "dispatch: {a: b}\n", `2:11: dispatch must be a list of rules, not a mapping`},
		{"rule scalar", v + "dispatch: [a]\n", `2:12: dispatch rule 1 must be a mapping (match:, command: or regex:, and profile:)`},
		{"rule empty", v + "profiles: {a: {}}\ndispatch:\n  - profile: a\n", `4:5: dispatch rule 1 needs one of match, command or regex`},
		{"rule two kinds", v + "profiles: {a: {}}\ndispatch:\n  - match: x\n    regex: y\n    profile: a\n", `5:5: dispatch rule 1 has both match and regex; a rule takes one of match, command or regex`},
		{"rule args without command", v + "profiles: {a: {}}\ndispatch:\n  - match: x\n    args: [y]\n    profile: a\n", `5:5: args go with command (command: npm, args: [install, "*"]); match matches the whole command line`},
		{"rule no profile", v + "dispatch:\n  - match: x\n", `3:5: dispatch rule 1 needs a profile`},
		{"rule unknown profile", v + "profiles: {install: {}}\ndispatch:\n  - match: x\n    profile: instal\n", `5:14: unknown profile "instal" (did you mean "install"?); defined: install`},
		{"rule no profiles", v + "dispatch:\n  - {match: x, profile: a}\n", `3:25: unknown profile "a"; no profiles are defined (profiles:)`},
		{"rule unknown key", v + "dispatch:\n  - {match: x, profil: a}\n", `3:16: unknown key "profil" in dispatch rule 1 (did you mean "profile"?)`},
		{"rule regex", v + "profiles: {a: {}}\ndispatch:\n  - {regex: \"npm (\", profile: a}\n", `4:13: invalid regex: missing closing ): ` + "`npm (`"},
		{"rule glob", v + "profiles: {a: {}}\ndispatch:\n  - {match: \"x\\\\\", profile: a}\n", `4:13: invalid match "x\\": a \ at the end quotes nothing`},
		{"rule command path", v + "profiles: {a: {}}\ndispatch:\n  - {command: /usr/bin/npm, profile: a}\n", `4:15: invalid command "/usr/bin/npm": use the command's name without a directory (npm, not /usr/bin/npm)`},
		{"rule command glob", v + "profiles: {a: {}}\ndispatch:\n  - {command: \"py*\", profile: a}\n", `4:15: invalid command "py*": command is compared exactly; use match: or regex: for patterns`},
		{"rule args scalar", v + "profiles: {a: {}}\ndispatch:\n  - {command: npm, args: ci, profile: a}\n", `4:26: args must be a list, not a single value`},
		{"parse error first", v + "a: [\n", `2:5: unterminated [ (opened at line 2, column 4)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("pinfold.yaml", []byte(c.in))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse(%q) = %v; want an *Error", c.in, err)
			}
			got := strings.TrimPrefix(strings.SplitN(e.Error(), "\n", 2)[0], "pinfold.yaml:")
			if got != c.want {
				t.Errorf("Parse(%q)\n got %s\nwant %s", c.in, got, c.want)
			}
		})
	}
}

func TestUnknownKeyAllowed(t *testing.T) {
	_, err := Parse("p.yaml", []byte("version: 1\nlimits:\n  mem: 1g\n"))
	var e *Error
	if !errors.As(err, &e) || !reflect.DeepEqual(e.Allowed, limitsKeys[:]) {
		t.Fatalf("%#v", err)
	}
	// The error's list is a copy: changing it leaves the table alone.
	e.Allowed[0] = "x"
	if limitsKeys[0] != "cpus" {
		t.Error("Error.Allowed aliases the key table")
	}
}

func TestErrorRendering(t *testing.T) {
	src := "version: 1\nprofiles:\n  install:\n    role: install\n    netwrok: host\n"
	_, err := Parse("pinfold.yaml", []byte(src))
	want := `pinfold.yaml:5:5: unknown key "netwrok" in profile "install" (did you mean "network"?)
    5 |     netwrok: host
      |     ^
allowed keys: access, allow, auto, backend, base, caches, cap_add, capabilities, capture, deny, dns, env, host, host_loopback, hostname, limits, lockfile_files, mounts, network, ports, pre_run, require_lockfile, require_pinned_image, role, secrets, trusted_keys, user, verify_signature, workdir`
	if err == nil || err.Error() != want {
		t.Errorf("got\n%v\nwant\n%s", err, want)
	}

	for _, c := range []struct {
		name string
		e    Error
		want string
	}{
		{"no position", Error{Path: "/x/pinfold.yaml", Msg: "cannot be read: permission denied"},
			"/x/pinfold.yaml: cannot be read: permission denied"},
		{"wide line number", Error{Path: "p", Pos: Pos{123456, 3}, Msg: "m", Line: "abcdef"},
			"p:123456:3: m\n123456 | abcdef\n       |   ^"},
		{"tabs kept", Error{Path: "p", Pos: Pos{2, 4}, Msg: "m", Line: "a\tb c"},
			"p:2:4: m\n    2 | a\tb c\n      |  \t ^"},
		{"multi-byte", Error{Path: "p", Pos: Pos{1, 4}, Msg: "m", Line: "ééé x"},
			"p:1:4: m\n    1 | ééé x\n      |    ^"},
		{"end of line", Error{Path: "p", Pos: Pos{1, 4}, Msg: "m", Line: "abc"},
			"p:1:4: m\n    1 | abc\n      |    ^"},
		{"blank line", Error{Path: "p", Pos: Pos{1, 1}, Msg: "m", Line: "  "}, "p:1:1: m"},
		{"long line", Error{Path: "p", Pos: Pos{1, 200}, Msg: "m", Line: strings.Repeat("a", 199) + "X" + strings.Repeat("b", 100)},
			"p:1:200: m\n    1 | ..." + strings.Repeat("a", 60) + "X" + strings.Repeat("b", 59) + "...\n      |    " + strings.Repeat(" ", 60) + "^"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}

func TestSuggest(t *testing.T) {
	keys := profileKeys[:]
	for in, want := range map[string]string{
		"netwrok": "network", "Network": "network", "tmp-size": "", "hostnme": "hostname", "xyz": "",
		"pre-run": "pre_run", "enviroment": "", "limit": "limits", "usr": "user", "x": "",
	} {
		if got := suggest(in, keys); got != want {
			t.Errorf("suggest(%q) = %q, want %q", in, got, want)
		}
	}
	if got := suggest("tmp-size", limitsKeys[:]); got != "tmp_size" {
		t.Errorf("suggest(tmp-size) = %q", got)
	}
}

func TestFind(t *testing.T) {
	root := t.TempDir()
	deep := filepath.Join(root, "a", "b", "c")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(root, "a", FileName)
	if err := os.WriteFile(cfg, []byte("version: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{deep, filepath.Join(root, "a", "b"), filepath.Join(root, "a")} {
		if got, err := Find(dir); err != nil || got != cfg {
			t.Errorf("Find(%s) = %q, %v; want %q", dir, got, err, cfg)
		}
	}
	// A nearer file wins.
	near := filepath.Join(deep, FileName)
	if err := os.WriteFile(near, []byte("version: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := Find(deep); err != nil || got != near {
		t.Errorf("Find = %q, %v; want %q", got, err, near)
	}
	// Relative directories are taken from the current one.
	t.Chdir(deep)
	if got, err := Find("."); err != nil || got != near {
		t.Errorf("Find(.) = %q, %v; want %q", got, err, near)
	}
	// None above root's parent (which a test cannot control) is
	// checked by a directory holding no file, walking to /: it may find
	// one only if the machine has /pinfold.yaml or /tmp/pinfold.yaml.
	other := filepath.Join(root, "x")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := Find(other); err != nil || strings.HasPrefix(got, root) {
		t.Errorf("Find(%s) = %q, %v; want nothing under %s", other, got, err, root)
	}
	// A directory named pinfold.yaml is an error, not silence.
	odd := filepath.Join(root, "odd")
	if err := os.MkdirAll(filepath.Join(odd, FileName), 0o755); err != nil {
		t.Fatal(err)
	}
	var e *Error
	if _, err := Find(odd); !errors.As(err, &e) || !strings.Contains(e.Msg, "not a regular file") {
		t.Errorf("Find(odd) = %v", err)
	}
	// A file given as the directory finds nothing there and walks on.
	if got, err := Find(filepath.Join(other, "..", "a", FileName)); err != nil || got != cfg {
		t.Errorf("Find(file) = %q, %v; want %q", got, err, cfg)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	if err := os.WriteFile(path, []byte("version: 1\nnetwork: host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	f, err := Load(FileName)
	if err != nil || f.Path != path || *f.Settings.Network != "host" {
		t.Fatalf("Load = %+v, %v", f, err)
	}

	_, err = Load(filepath.Join(dir, "missing.yaml"))
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, fs.ErrNotExist) || e.Error() != filepath.Join(dir, "missing.yaml")+": cannot be read: no such file or directory" {
		t.Errorf("Load(missing) = %v", err)
	}

	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("version: 1\n"+strings.Repeat("# padding\n", 120000)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); !errors.As(err, &e) || !strings.Contains(e.Msg, "larger than 1 MiB") {
		t.Errorf("Load(big) = %v", err)
	}

	if err := os.WriteFile(path, []byte("version: 1\nnetwork: hots\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(FileName); err == nil || !strings.HasPrefix(err.Error(), "pinfold.yaml:2:10: invalid network") {
		t.Errorf("Load(bad) = %v", err)
	}
}

func TestSizeAndDurationGrammar(t *testing.T) {
	for _, s := range []string{"512", "64k", "256m", "2g", "1.5G", "512MiB", "1t", "100mb", "10b", "1Kb", "3.25m"} {
		if p := checkSize(s); p != "" {
			t.Errorf("checkSize(%q) = %s", s, p)
		}
	}
	for _, s := range []string{"", "m", ".5g", "5.g", "1e3", "0x10", "1 g", " 1g", "1gb2", "1mi", "1kk", "-1m", "inf", "1x"} {
		if checkSize(s) == "" {
			t.Errorf("checkSize(%q) accepted", s)
		}
	}
	for _, s := range []string{"90", "1.5", "30s", "5m", "1h30m", "500ms", "1.5h", "2h3m4s5ms6us7ns", "3µs"} {
		if p := checkDuration(s); p != "" {
			t.Errorf("checkDuration(%q) = %s", s, p)
		}
	}
	for _, s := range []string{"", "s", "1e3", "-5m", "+5m", "5 m", "5mm", "1.h", "1h.5m", "inf", "NaN", "5d"} {
		if checkDuration(s) == "" {
			t.Errorf("checkDuration(%q) accepted", s)
		}
	}
}
