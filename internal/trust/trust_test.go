package trust_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/internal/tarentry/tartest"
	"github.com/pinfold/pinfold/internal/trust"
	"github.com/pinfold/pinfold/internal/trust/trusttest"
)

func TestVerify(t *testing.T) {
	if _, err := exec.LookPath("skopeo"); err != nil {
		t.Skip("verification needs skopeo (scripts/test-setup.sh installs it)")
	}
	reg := trusttest.NewRegistry(t)
	dir := t.TempDir()
	good := trusttest.NewKey(t, dir, "good")
	other := trusttest.NewKey(t, dir, "other")
	repo := reg.Addr + "/team/app"
	layer := tartest.Tar(t, tartest.File("etc/hello", 0o644, "hi\n"))
	signed := reg.PushImage("team/app", "signed", layer)
	reg.Sign(t, "team/app", signed, trusttest.Payload(repo, signed), good)
	unsigned := reg.PushImage("team/app", "unsigned", tartest.Tar(t, tartest.File("etc/hello", 0o644, "unsigned\n")))
	wrongKey := reg.PushImage("team/app", "wrong-key", tartest.Tar(t, tartest.File("etc/hello", 0o644, "other\n")))
	reg.Sign(t, "team/app", wrongKey, trusttest.Payload(repo, wrongKey), other)
	// A signature of the signed image replayed onto another one: its
	// payload names the first digest.
	replayed := reg.PushImage("team/app", "replayed", tartest.Tar(t, tartest.File("etc/hello", 0o644, "evil\n")))
	reg.Sign(t, "team/app", replayed, trusttest.Payload(repo, signed), good)

	keys, err := trust.LoadKeys([]string{good.PubPEM})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	v, err := trust.Verify(ctx, repo+":signed", keys)
	if err != nil {
		t.Fatal(err)
	}
	if v.Digest != signed || v.Pinned != repo+"@"+signed || v.Key != good.PubPEM {
		t.Errorf("verified %+v, want %s", v, signed)
	}
	if _, err := trust.Verify(ctx, repo+"@"+signed, keys); err != nil {
		t.Errorf("by digest: %v", err)
	}
	for ref, want := range map[string]string{
		repo + ":unsigned":  "has no signature",
		repo + ":wrong-key": "none of the trusted keys made",
		repo + ":replayed":  "a signature of another manifest",
		repo + ":missing":   "reading",
	} {
		_, err := trust.Verify(ctx, ref, keys)
		if !errors.Is(err, trust.ErrUnverified) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want ErrUnverified saying %q", ref, err, want)
		}
	}
	if _, err := trust.Verify(ctx, repo+":signed", nil); !errors.Is(err, trust.ErrUnverified) {
		t.Errorf("no keys: %v", err)
	}
	// Both keys trusted: either signature verifies.
	both, _ := trust.LoadKeys([]string{good.PubPEM, other.PubPEM})
	if v, err := trust.Verify(ctx, repo+":wrong-key", both); err != nil || v.Key != other.PubPEM {
		t.Errorf("second key: %+v %v", v, err)
	}
	_ = unsigned
}

func TestLoadKeysRefusesOtherPEM(t *testing.T) {
	dir := t.TempDir()
	k := trusttest.NewKey(t, dir, "k")
	if _, err := trust.LoadKeys([]string{k.PubPEM, dir + "/missing.pub"}); err == nil {
		t.Error("a missing key file was accepted")
	}
	if _, err := trust.LoadKeys([]string{"/etc/hostname"}); err == nil || !strings.Contains(err.Error(), "not a PEM public key") {
		t.Errorf("a file that is no key: %v", err)
	}
}

func TestReferences(t *testing.T) {
	for ref, want := range map[string][2]string{
		"reg.example:5000/a/b:1.2": {"reg.example:5000/a/b", "1.2"},
		"reg.example/a/b":          {"reg.example/a/b", ""},
		"reg.example/a@sha256:abc": {"reg.example/a", "sha256:abc"},
		"docker://localhost/x:y":   {"localhost/x", "y"},
		"127.0.0.1:5000/team/app":  {"127.0.0.1:5000/team/app", ""},
	} {
		r, d := trust.SplitReference(ref)
		if r != want[0] || d != want[1] {
			t.Errorf("%s: %q %q", ref, r, d)
		}
	}
	if !trust.Pinned("r.example/a@sha256:"+strings.Repeat("a", 64)) || trust.Pinned("r.example/a:latest") || trust.Pinned("r.example/a@sha256:abc") {
		t.Error("Pinned")
	}
}
