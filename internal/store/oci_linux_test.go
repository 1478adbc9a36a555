package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// writeLayout writes an OCI image layout with one uncompressed layer.
func writeLayout(t *testing.T, dir string, layer []byte) string {
	t.Helper()
	blob := func(b []byte) (string, int) {
		sum := sha256.Sum256(b)
		h := hex.EncodeToString(sum[:])
		if err := os.MkdirAll(filepath.Join(dir, "blobs/sha256"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "blobs/sha256", h), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return "sha256:" + h, len(b)
	}
	ld, ln := blob(layer)
	cfg, _ := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux",
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{ld}}, "config": map[string]any{}})
	cd, cn := blob(cfg)
	man, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cn},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": ld, "size": ln}}})
	md, mn := blob(man)
	idx, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{map[string]any{
		"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": mn,
		"annotations": map[string]string{"org.opencontainers.image.ref.name": "v1"}}}})
	os.WriteFile(filepath.Join(dir, "index.json"), idx, 0o644)
	os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
	return cd
}

func TestOCIBase(t *testing.T) {
	s := openStore(t, t.TempDir())
	layout := t.TempDir()
	id := writeLayout(t, layout, makeTar(t, dir("etc", 0o755), file("etc/os-release", 0o644, "ID=oci-test\n")))
	ctx := context.Background()
	b, err := s.OCIBase(ctx, layout, "v1", ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b.Digest != id {
		t.Errorf("id %s, want the config digest %s", b.Digest, id)
	}
	if got, err := os.ReadFile(b.Root + "/etc/os-release"); err != nil || string(got) != "ID=oci-test\n" {
		t.Errorf("os-release %q, %v", got, err)
	}
	n := s.imports.Load()
	if again, err := s.OCIBase(ctx, layout, "", ImportOptions{}); err != nil || again != b || s.imports.Load() != n {
		t.Errorf("second use: %+v %v, imports %d -> %d", again, err, n, s.imports.Load())
	}
	if _, err := s.OCIBase(ctx, layout, "v2", ImportOptions{}); err == nil {
		t.Error("a missing ref was accepted")
	}
	list, _ := s.Bases()
	if len(list) != 1 || list[0].Kind != "oci" || list[0].ID != id {
		t.Errorf("Bases = %+v", list)
	}
}
