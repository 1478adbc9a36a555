package cli_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCosignInterop checks pinfold's signatures against cosign itself,
// both ways, on a registry on loopback and offline (no transparency log,
// no certificate authority): cosign verifies what `pack image --push
// --sign-key` signed, and `run --base oci: --verify-key` accepts what
// `cosign sign --key` signed, and refuses it under another key. cosign is
// no Debian package: scripts/test-setup.sh builds it from the Go module proxy
// into /var/cache/pinfold-tools (PINFOLD_COSIGN names another).
func TestCosignInterop(t *testing.T) {
	needRoot(t)
	needTool(t, "skopeo")
	cosign := os.Getenv("PINFOLD_COSIGN")
	if cosign == "" {
		cosign = "/var/cache/pinfold-tools/cosign"
	}
	if _, err := os.Stat(cosign); err != nil {
		if p, err := exec.LookPath("cosign"); err == nil {
			cosign = p
		} else {
			t.Skip("no cosign (scripts/test-setup.sh builds it)")
		}
	}
	f := newPackFixture(t)
	key, pub := newSigningKey(t, f.dir, "pinfold")
	_, other := newSigningKey(t, f.dir, "other")
	reg := startRegistry(t)
	home := t.TempDir()
	runCosign := func(args ...string) (string, error) {
		cmd := exec.Command(cosign, args...)
		cmd.Dir = f.dir
		// Nothing from the user's cosign set-up, no password prompt, and
		// no cache of sigstore's public roots (it is not fetched offline).
		cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "COSIGN_PASSWORD=", "TUF_ROOT=" + filepath.Join(home, "tuf")}
		b, err := cmd.CombinedOutput()
		return string(b), err
	}

	// pinfold signs, cosign verifies.
	ref := reg + "/team/signed:1"
	out, errs, code := f.pack(t, "", "image", "--base", "tar:"+f.base, "--push", ref, "--sign-key", key, "--json", "--", "./run.sh")
	var r struct{ Digest string }
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("pack --push --sign-key: %d %q %s", code, out, errs)
	}
	pinned := reg + "/team/signed@" + r.Digest
	verify := []string{"verify", "--offline", "--insecure-ignore-tlog", "--allow-http-registry", "--allow-insecure-registry"}
	if got, err := runCosign(append(verify, "--key", pub, pinned)...); err != nil || !strings.Contains(got, r.Digest) {
		t.Errorf("cosign verify of pinfold's signature: %v\n%s", err, got)
	}
	if got, err := runCosign(append(verify, "--key", other, pinned)...); err == nil {
		t.Errorf("cosign verified pinfold's signature under another key:\n%s", got)
	}

	// cosign signs, pinfold verifies.
	if got, err := runCosign("generate-key-pair"); err != nil {
		t.Fatalf("cosign generate-key-pair: %v\n%s", err, got)
	}
	ref2 := reg + "/team/cosigned:1"
	out, errs, code = f.pack(t, "", "image", "--base", "tar:"+f.base, "--push", ref2, "--json", "--", "./run.sh")
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("pack --push: %d %q %s", code, out, errs)
	}
	pinned2 := reg + "/team/cosigned@" + r.Digest
	if got, err := runCosign("sign", "--yes", "--tlog-upload=false", "--allow-http-registry", "--allow-insecure-registry",
		"--key", filepath.Join(f.dir, "cosign.key"), pinned2); err != nil {
		t.Fatalf("cosign sign: %v\n%s", err, got)
	}

	// pack signs with cosign's own (encrypted) key, cosign verifies.
	t.Setenv("COSIGN_PASSWORD", "")
	ref3 := reg + "/team/withcosignkey:1"
	out, errs, code = f.pack(t, "", "image", "--base", "tar:"+f.base, "--push", ref3, "--sign-key", filepath.Join(f.dir, "cosign.key"), "--json", "--", "./run.sh")
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("pack --sign-key cosign.key: %d %q %s", code, out, errs)
	}
	if got, err := runCosign(append(verify, "--key", filepath.Join(f.dir, "cosign.pub"), reg+"/team/withcosignkey@"+r.Digest)...); err != nil {
		t.Errorf("cosign verify of pinfold's signature with cosign's key: %v\n%s", err, got)
	}
	t.Setenv("COSIGN_PASSWORD", "not the password")
	if _, errs, code := f.pack(t, "", "image", "--base", "tar:"+f.base, "--push", ref3, "--sign-key", filepath.Join(f.dir, "cosign.key")); code == 0 || !strings.Contains(errs, "wrong password") {
		t.Errorf("pack with cosign's key and a wrong password: %d %s", code, errs)
	}
	os.Unsetenv("COSIGN_PASSWORD")
	if _, errs, code := f.pack(t, "", "image", "--base", "tar:"+f.base, "--push", ref3, "--sign-key", filepath.Join(f.dir, "cosign.key")); code == 0 || !strings.Contains(errs, "set COSIGN_PASSWORD") {
		t.Errorf("pack with cosign's key and no password: %d %s", code, errs)
	}

	t.Setenv("PINFOLD_STORE", filepath.Join(f.dir, "store-pull"))
	got, errs, code := pf(t, f.ws, "run", "--access", "none", "-w", f.ws, "--base", "oci:"+ref2,
		"--verify-key", filepath.Join(f.dir, "cosign.pub"), "--", "./run.sh", "cosigned")
	if code != 0 || got != "run.sh cosigned\nhello from the image\n" {
		t.Errorf("run of cosign's signed image with cosign's key trusted: %d %q %s", code, got, errs)
	}
	if _, errs, code := pf(t, f.ws, "run", "--access", "none", "--base", "oci:"+ref2, "--verify-key", other, "--", "true"); code != 125 || !strings.Contains(errs, "PF177") {
		t.Errorf("run of cosign's signed image with another key trusted: %d %s", code, errs)
	}
}
