package cli_test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDebianBaseAndCapabilities builds debian-12 from the machine's mirror
// on first use, adds a capability as an image named by the sandbox id, and
// reuses both.
func TestDebianBaseAndCapabilities(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("building debian-12 needs root")
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		t.Skip("debootstrap is not installed (scripts/test-setup.sh installs it)")
	}
	if testing.Short() {
		t.Skip("builds Debian and installs packages (about 2 minutes)")
	}
	t.Setenv("PINFOLD_STORE", t.TempDir())
	ws := packableDir(t) // packed below: not under /tmp, which a sandbox covers
	os.WriteFile(filepath.Join(ws, "pinfold.yaml"), []byte("version: 1\nbase: debian-12\ncapabilities: [xml]\n"), 0o644)
	probe := []string{"run", "--access", "ro", "--", "sh", "-c", "test -e /usr/lib/x86_64-linux-gnu/libxml2.so.2 && cat /etc/debian_version"}
	out, errs, code := pf(t, ws, probe...)
	if code != 0 || !strings.HasPrefix(out, "12.") {
		t.Fatalf("first run: exit %d, out %q, stderr %s", code, out, errs)
	}
	if !strings.Contains(errs, "building debian-12") || !strings.Contains(errs, "adding xml to debian-12") {
		t.Errorf("first run did not say it built: %s", errs)
	}
	out, errs, code = pf(t, ws, probe...)
	if code != 0 || strings.Contains(errs, "building") || strings.Contains(errs, "adding") {
		t.Errorf("second run rebuilt: exit %d %q %s", code, out, errs)
	}
	explain, _, _ := pf(t, ws, "explain")
	if !strings.Contains(explain, "xml            explicit") || !strings.Contains(explain, "image built") {
		t.Errorf("explain:\n%s", explain)
	}
	images, _, _ := pf(t, ws, "images")
	if !strings.Contains(images, "xml") {
		t.Errorf("images:\n%s", images)
	}

	// Inferred from a lockfile: the same capability, so the same image;
	// in CI (or --frozen) it must be written down first.
	os.WriteFile(filepath.Join(ws, "pinfold.yaml"), []byte("version: 1\nbase: debian-12\n"), 0o644)
	os.WriteFile(filepath.Join(ws, "requirements.txt"), []byte("lxml==5.2.1\n"), 0o644)
	t.Setenv("CI", "")
	_, errs, code = pf(t, ws, "run", "--access", "ro", "--frozen", "--", "true")
	if code == 0 || !strings.Contains(errs, "PF125") || !strings.Contains(errs, "capabilities: [xml]") {
		t.Errorf("frozen run with an inferred capability: exit %d %s", code, errs)
	}
	out, errs, code = pf(t, ws, probe...)
	if code != 0 || strings.Contains(errs, "adding") {
		t.Errorf("inferred run: exit %d %q %s", code, out, errs)
	}
	explain, _, _ = pf(t, ws, "explain")
	if !strings.Contains(explain, "lockfile: requirements.txt: lxml==5.2.1") {
		t.Errorf("explain:\n%s", explain)
	}

	// The sandbox packed as an app runs on a store that has neither the
	// base nor the image, with the image's owners (group mail of
	// /var/mail), the capability's library, and what installing it
	// removed still removed (apt's lists, whiteouts in the layer).
	needPackHelper(t)
	app := filepath.Join(t.TempDir(), "debian.pinfold")
	packed, errs, code := pf(t, ws, "pack", "app", "--out", app, "--json")
	var r struct{ Layers []string }
	if code != 0 || json.Unmarshal([]byte(packed), &r) != nil {
		t.Fatalf("pack app: %d %q %s", code, packed, errs)
	}
	if len(r.Layers) != 3 {
		t.Errorf("want 3 layers (the base, the capability's packages, the workspace): %q", r.Layers)
	}
	// Without capabilities, the same base layer and the workspace.
	ws2 := packableDir(t)
	os.WriteFile(filepath.Join(ws2, "pinfold.yaml"), []byte("version: 1\nbase: debian-12\n"), 0o644)
	packed, errs, code = pf(t, ws2, "pack", "image", "--out", filepath.Join(t.TempDir(), "plain.tar"), "--json")
	var plain struct{ Layers []string }
	if code != 0 || json.Unmarshal([]byte(packed), &plain) != nil || len(plain.Layers) != 2 || len(r.Layers) == 0 || plain.Layers[0] != r.Layers[0] {
		t.Errorf("plain debian-12: %d %q %s (the capability image's layers: %q)", code, packed, errs, r.Layers)
	}
	// Every path of the system is there, as the same type, and nothing
	// the capability's install removed is (whiteouts, opaque directories).
	// Modes and owners may differ: an image file's set-id bits are dropped
	// when it is unpacked as a base (docs/bases.md), and the curated
	// base's hard-linked files carry their owner shift twice (a store bug
	// a pack does not copy: their owners are 0 in the image).
	list := "find /usr /etc /var /opt /bin /sbin /lib /lib64 -printf '%p %y\\n' 2>/dev/null | sort | sha256sum"
	want, errs, code := pf(t, ws, "run", "--access", "ro", "--", "sh", "-c", list)
	if code != 0 {
		t.Fatalf("listing the image: %d %s", code, errs)
	}
	t.Setenv("PINFOLD_STORE", t.TempDir())
	if got, errs, code := pf(t, "/", "run", "-w", "/", app, "--", "sh", "-c", list); code != 0 || got != want {
		t.Errorf("the app's system differs from the image's: %q, want %q (%d %s)", got, want, code, errs)
	}
	out, errs, code = pf(t, "/", "run", "-w", "/", app, "--", "sh", "-c",
		"test -e /usr/lib/x86_64-linux-gnu/libxml2.so.2 && stat -c %g /var/mail && ls /var/lib/apt/lists | grep -c _ ; cat /etc/debian_version")
	if code != 0 || !strings.HasPrefix(out, "8\n0\n12.") {
		t.Errorf("the packed debian-12 with xml: exit %d, out %q, stderr %s", code, out, errs)
	}
}

// TestOCIBase runs a command from an OCI image layout whose one layer
// holds a static binary.
func TestOCIBase(t *testing.T) {
	t.Setenv("PINFOLD_STORE", t.TempDir())
	bin, err := os.ReadFile(pinfold)
	if err != nil {
		t.Fatal(err)
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "bin/", Mode: 0o755})
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/hello", Mode: 0o755, Size: int64(len(bin))})
	tw.Write(bin)
	tw.Close()
	layout := t.TempDir()
	blob := func(b []byte) (string, int) {
		sum := sha256.Sum256(b)
		h := hex.EncodeToString(sum[:])
		os.MkdirAll(filepath.Join(layout, "blobs/sha256"), 0o755)
		os.WriteFile(filepath.Join(layout, "blobs/sha256", h), b, 0o644)
		return "sha256:" + h, len(b)
	}
	ld, ln := blob(layer.Bytes())
	cfg, _ := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux",
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{ld}}})
	cd, cn := blob(cfg)
	man, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cn},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": ld, "size": ln}}})
	md, mn := blob(man)
	idx, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{map[string]any{
		"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": mn,
		"annotations": map[string]string{"org.opencontainers.image.ref.name": "latest"}}}})
	os.WriteFile(filepath.Join(layout, "index.json"), idx, 0o644)
	os.WriteFile(filepath.Join(layout, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)

	ws := t.TempDir()
	out, errs, code := pf(t, ws, "run", "--access", "none", "--base", "oci:"+layout+":latest", "--", "/bin/hello", "version")
	if code != 0 || !strings.Contains(out, "pinfold") {
		t.Fatalf("run on the oci base: exit %d, out %q, stderr %s", code, out, errs)
	}
	explain, _, _ := pf(t, ws, "explain", "--access", "none", "--base", "oci:"+layout+":latest")
	if !strings.Contains(explain, cd) {
		t.Errorf("explain does not show the image's config digest %s:\n%s", cd, explain)
	}
	list, _, _ := pf(t, ws, "base", "ls")
	if !strings.Contains(list, "oci") || !strings.Contains(list, cd[len("sha256:"):][:12]) {
		t.Errorf("base ls:\n%s", list)
	}
	_, errs, code = pf(t, ws, "run", "--access", "none", "--base", "oci:"+layout+":nope", "--", "/bin/hello")
	// The Fix shows how to name one of the images the layout lists.
	if code == 0 || !strings.Contains(errs, "nope") || !strings.Contains(errs, "Fix: name one of the images the file lists: --base oci:"+layout+":NAME, e.g. --base oci:"+layout+":latest") {
		t.Errorf("a missing ref: exit %d %s", code, errs)
	}
}
