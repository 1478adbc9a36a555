package plan

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/internal/config"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/sandbox"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestResolveDefaults(t *testing.T) {
	p, err := Resolve(&Request{Args: []string{"npm", "test"}, Cwd: "/work/app"})
	if err != nil {
		t.Fatal(err)
	}
	want := sandbox.Spec{
		Base:      sandbox.Base{Kind: sandbox.BaseHost},
		Workspace: "/work/app",
		Access:    sandbox.AccessChangeset,
		Hostname:  "sandbox",
		Network:   sandbox.NetworkNone,
		Limits:    sandbox.Limits{TmpSize: sandbox.DefaultTmpSize},
	}
	if !reflect.DeepEqual(p.Sandbox, want) {
		t.Errorf("spec:\n got %+v\nwant %+v", p.Sandbox, want)
	}
	if p.Command.Dir != "/work/app" || p.Sources["workspace"] != FromCwd || p.Sources["network"] != FromDefault ||
		p.Mode != "sandbox" || p.Backend != "native" || p.Audit.Role != "run" || p.Audit.Lockfile != "none configured" {
		t.Errorf("dir %q sources %v", p.Command.Dir, p.Sources)
	}
	names := []string{}
	for _, v := range p.Command.Env {
		names = append(names, v.Name)
		if v.From != FromDefault {
			t.Errorf("%s from %s", v.Name, v.From)
		}
	}
	if !reflect.DeepEqual(names, []string{"PATH", "HOME", "HOSTNAME"}) {
		t.Errorf("env %v", names)
	}
}

func TestResolveFlags(t *testing.T) {
	p, err := Resolve(&Request{
		Args: []string{"make"},
		Cwd:  "/work/app/sub",
		Flags: Flags{Base: "tar:/b/root.tgz", Access: "ro", Workspace: "/work/app", User: "root",
			Hostname: "box", Network: "host", Memory: "512m", Pids: "64", CPUs: "1.5", TmpSize: "2g",
			Timeout: "90", Mounts: []string{"data:/data:ro", "/etc/x:/x"}, TTY: true,
			Env: []string{"A=1", "HOME", "MISSING", "A=2"}},
		Getenv: env(map[string]string{"HOME": "/root"}),
		Term:   "screen",
	})
	if err != nil {
		t.Fatal(err)
	}
	sp := p.Sandbox
	if sp.Base != (sandbox.Base{Kind: sandbox.BaseTar, Path: "/b/root.tgz"}) || sp.Access != sandbox.AccessReadOnly ||
		!sp.Root || sp.Hostname != "box" || sp.Network != sandbox.NetworkHost ||
		sp.Limits != (sandbox.Limits{Memory: 512 << 20, Pids: 64, CPUs: 1.5, TmpSize: 2 << 30}) ||
		p.Timeout != 90*time.Second || !p.TTY {
		t.Errorf("plan %+v", p)
	}
	wantMounts := []sandbox.Mount{{Source: "/work/app/sub/data", Target: "/data", ReadOnly: true}, {Source: "/etc/x", Target: "/x"}}
	if !reflect.DeepEqual(sp.Mounts, wantMounts) {
		t.Errorf("mounts %+v", sp.Mounts)
	}
	// cwd follows into the workspace.
	if p.Command.Dir != "/work/app/sub" {
		t.Errorf("dir %q", p.Command.Dir)
	}
	got := map[string]EnvVar{}
	for _, v := range p.Command.Env {
		got[v.Name] = v
	}
	if got["A"].Value != "2" || got["A"].From != FromFlag+" --env" || got["HOME"].Value != "/root" ||
		got["HOME"].From != FromHost+" (--env)" || got["TERM"].Value != "screen" {
		t.Errorf("env %+v", got)
	}
	if _, ok := got["MISSING"]; ok {
		t.Error("an unset host variable was passed")
	}
}

func TestResolveErrors(t *testing.T) {
	for _, f := range []Flags{
		{Base: "oci:"}, {Base: "debian-11"}, {Base: "dir:"}, {Access: "rwx"}, {Network: "outbound-only"}, {Network: "allow"}, {Network: "host", Publish: []string{"80:80"}}, {Network: "allow", Allow: []string{"https://x.org/"}}, {Network: "outbound", Publish: []string{"x"}}, {Network: "outbound", DNS: []string{"resolver"}}, {User: "nobody"},
		{Hostname: "bad host"}, {Memory: "1k"}, {Memory: "lots"}, {Pids: "0"}, {CPUs: "-1"},
		{TmpSize: "10"}, {Timeout: "soon"}, {Mounts: []string{"/a"}}, {Mounts: []string{"/a:rel"}},
		{Env: []string{"=x"}}, {Workdir: "rel"},
	} {
		_, err := Resolve(&Request{Args: []string{"true"}, Cwd: "/w", Flags: f})
		var fe *fault.Error
		if !errors.As(err, &fe) || fe.Code != fault.BadValue || fe.Exit != fault.ExitUsage {
			t.Errorf("%+v: got %v", f, err)
		}
	}
	if _, err := Resolve(&Request{Cwd: "/w"}); err == nil {
		t.Error("no command accepted")
	}
}

func TestAccessNoneStartsAtRoot(t *testing.T) {
	p, err := Resolve(&Request{Args: []string{"true"}, Cwd: "/w", Flags: Flags{Access: "none"}})
	if err != nil || p.Command.Dir != "/" {
		t.Errorf("%v %q", err, p.Command.Dir)
	}
}

func TestImagePolicy(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	resolve := func(f Flags, cfg *config.File) (*Plan, error) {
		return Resolve(&Request{Args: []string{"true"}, Cwd: "/w", Home: "/home/u", Flags: f, Config: cfg})
	}
	for base, level := range map[string]string{
		"":                                   TrustHost,
		"debian-12":                          TrustLocal,
		"dir:/srv/root":                      TrustLocal,
		"oci:img.tar":                        TrustLocal,
		"oci:reg.example/team/app:1.4":       TrustMutable,
		"oci:reg.example/team/app@" + digest: TrustPinned,
	} {
		p, err := resolve(Flags{Base: base}, nil)
		if err != nil || p.Audit.TrustLevel != level {
			t.Errorf("%q: level %q %v, want %s", base, p.Audit.TrustLevel, err, level)
		}
	}
	// require_pinned_image refuses a tag, from a flag or a profile.
	_, err := resolve(Flags{Base: "oci:reg.example/team/app:1.4", RequirePinnedImage: true}, nil)
	var fe *fault.Error
	if !errors.As(err, &fe) || fe.Code != fault.Unpinned || !strings.Contains(fe.Fix, "reg.example/team/app@sha256:") {
		t.Errorf("a tag with require_pinned_image: %v", err)
	}
	if _, err := resolve(Flags{Base: "oci:reg.example/team/app@" + digest, RequirePinnedImage: true}, nil); err != nil {
		t.Errorf("a digest with require_pinned_image: %v", err)
	}
	cfg := &config.File{Path: "/w/pinfold.yaml", Settings: config.Settings{
		RequirePinnedImage: ptr(true), VerifySignature: ptr(true), TrustedKeys: []string{"keys/team.pub", "~/cosign.pub"},
		Base: ptr("oci:reg.example/team/app@" + digest)}}
	p, err := resolve(Flags{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Image.RequirePinned || !p.Image.Verify || strings.Join(p.Image.Keys, " ") != "/w/keys/team.pub /home/u/cosign.pub" {
		t.Errorf("image policy %+v", p.Image)
	}
	// verify_signature with a base that is no registry image, or without
	// keys, is refused rather than run unchecked.
	cfg.Settings.Base = ptr("dir:/srv/root")
	if _, err := resolve(Flags{}, cfg); !errors.As(err, &fe) || fe.Code != fault.Unverified {
		t.Errorf("verify with a dir base: %v", err)
	}
	cfg.Settings.Base, cfg.Settings.TrustedKeys = ptr("oci:reg.example/team/app@"+digest), nil
	if _, err := resolve(Flags{}, cfg); !errors.As(err, &fe) || fe.Code != fault.Unverified {
		t.Errorf("verify without keys: %v", err)
	}
	// --verify-key turns verification on.
	p, err = resolve(Flags{Base: "oci:reg.example/team/app:1.4", VerifyKeys: []string{"k.pub"}}, nil)
	if err != nil || !p.Image.Verify || p.Image.Keys[0] != "/w/k.pub" {
		t.Errorf("--verify-key: %+v %v", p.Image, err)
	}
}
