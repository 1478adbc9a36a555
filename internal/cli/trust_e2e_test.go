package cli_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/internal/nettest"
	"github.com/pinfold/pinfold/internal/tarentry/tartest"
	"github.com/pinfold/pinfold/internal/trust/trusttest"
)

// TestSignedImages runs registry images through --verify-key and
// --require-pinned-image: a signed image runs by the digest that was
// verified; an unsigned one, one signed with another key, and a tag moved
// to unsigned content are refused before anything is pulled.
func TestSignedImages(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("image bases are unpacked as root here")
	}
	if _, err := exec.LookPath("skopeo"); err != nil {
		t.Skip("registry images need skopeo (scripts/test-setup.sh installs it)")
	}
	tools := t.TempDir()
	client, err := nettest.BuildClient(tools)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(client)
	if err != nil {
		t.Fatal(err)
	}
	image := func(marker string) []byte {
		return tartest.Tar(t, tartest.Dir("bin", 0o755), tartest.File("bin/probe", 0o755, string(bin)),
			tartest.Dir("etc", 0o755), tartest.File("etc/marker", 0o644, marker))
	}
	reg := trusttest.NewRegistry(t)
	keys := t.TempDir()
	good := trusttest.NewKey(t, keys, "good")
	other := trusttest.NewKey(t, keys, "other")
	repo := reg.Addr + "/team/app"
	signed := reg.PushImage("team/app", "signed", image("signed"))
	reg.Sign(t, "team/app", signed, trusttest.Payload(repo, signed), good)
	reg.PushImage("team/app", "unsigned", image("unsigned"))
	byOther := reg.PushImage("team/app", "other", image("other"))
	reg.Sign(t, "team/app", byOther, trusttest.Payload(repo, byOther), other)

	ws := t.TempDir()
	t.Setenv("PINFOLD_STORE", t.TempDir())
	run := func(args ...string) (string, string, int) {
		return pf(t, ws, append([]string{"run", "--access", "none"}, args...)...)
	}
	out, errs, code := run("--base", "oci:"+repo+":signed", "--verify-key", good.PubPEM, "--", "/bin/probe", "hello")
	if code != 0 || !strings.Contains(out, `"err"`) || !strings.Contains(errs, "verified the signature of "+repo+":signed ("+signed+")") {
		t.Fatalf("signed image: %d %q %q", code, out, errs)
	}
	for _, c := range []struct {
		tag, want string
	}{
		{"unsigned", "has no signature"},
		{"other", "none of the trusted keys made"},
	} {
		out, errs, code := run("--base", "oci:"+repo+":"+c.tag, "--verify-key", good.PubPEM, "--", "/bin/probe", "hello")
		if code != 125 || !strings.Contains(errs, "PF177") || !strings.Contains(errs, c.want) || out != "" {
			t.Errorf("%s: %d %q %q, want PF177 saying %q", c.tag, code, out, errs, c.want)
		}
	}
	// The tag moves to unsigned content: the next run checks again and
	// refuses, although the signed image is in the store.
	reg.PushImage("team/app", "signed", image("moved"))
	if _, errs, code := run("--base", "oci:"+repo+":signed", "--verify-key", good.PubPEM, "--", "/bin/probe", "hello"); code != 125 || !strings.Contains(errs, "PF177") {
		t.Errorf("a moved tag: %d %q", code, errs)
	}
	// By digest, the signed image still runs.
	if _, errs, code := run("--base", "oci:"+repo+"@"+signed, "--verify-key", good.PubPEM, "--require-pinned-image", "--", "/bin/probe", "x"); code != 0 {
		t.Errorf("by digest: %d %q", code, errs)
	}
	if _, errs, code := run("--base", "oci:"+repo+":signed", "--require-pinned-image", "--", "/bin/probe", "x"); code != 125 || !strings.Contains(errs, "PF176") {
		t.Errorf("a tag with --require-pinned-image: %d %q", code, errs)
	}
}
