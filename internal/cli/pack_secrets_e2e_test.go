package cli_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// layerEntries reads every layer of an image archive pinfold packed and
// returns each entry's name and content (a blob that is not gzip is the
// manifest or config, and skipped).
func layerEntries(t *testing.T, archive string) map[string][]byte {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(hdr.Name, "blobs/sha256/") {
			continue
		}
		blob, _ := io.ReadAll(tr)
		zr, err := gzip.NewReader(bytes.NewReader(blob))
		if err != nil {
			continue
		}
		lr := tar.NewReader(zr)
		for {
			h, err := lr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(lr)
			out[h.Name] = b
		}
	}
}

// TestPackLeavesSecretsOut packs workspaces whose pinfold.yaml names a
// secret file inside them: the file, and any other name of it, is left
// out of the image; a secret file git tracks refuses the pack.
func TestPackLeavesSecretsOut(t *testing.T) {
	f := newPackFixture(t)
	outside := filepath.Join(f.dir, "outside.pem")
	os.WriteFile(outside, []byte("TOPSECRET too\n"), 0o600)
	check := func(t *testing.T, ws, out string, args ...string) {
		t.Helper()
		t.Setenv("PINFOLD_STORE", f.store)
		_, errs, code := pf(t, ws, append([]string{"pack", "image", "--base", "tar:" + f.base, "--out", out}, args...)...)
		if code != 0 {
			t.Fatalf("pack: %d %s", code, errs)
		}
		ents := layerEntries(t, out)
		if len(ents) == 0 {
			t.Fatal("no layer entries read")
		}
		for name, b := range ents {
			if bytes.Contains(b, []byte("TOPSECRET")) || strings.HasSuffix(name, "deploy.pem") || strings.HasSuffix(name, "/.env") {
				t.Errorf("the image holds %s (%q)", name, b)
			}
		}
		ws = strings.TrimPrefix(ws, "/")
		if _, ok := ents[ws+"/app.txt"]; !ok {
			t.Errorf("the workspace's app.txt is not in the image: %v", ents)
		}
	}
	newWS := func(name string) string {
		ws := filepath.Join(f.dir, name)
		os.MkdirAll(filepath.Join(ws, "secrets"), 0o755)
		// A secret in the workspace, and one a run mounts there.
		cfg := "version: 1\nsecrets:\n  - name: deploy\n    file: ./secrets/deploy.pem\n" +
			"  - name: env\n    file: " + outside + "\n    path: " + ws + "/conf/.env\n"
		os.WriteFile(filepath.Join(ws, "pinfold.yaml"), []byte(cfg), 0o644)
		os.MkdirAll(filepath.Join(ws, "conf"), 0o755)
		os.WriteFile(filepath.Join(ws, "conf/.env"), []byte("placeholder\n"), 0o644)
		os.WriteFile(filepath.Join(ws, "app.txt"), []byte("app\n"), 0o644)
		os.WriteFile(filepath.Join(ws, "secrets/deploy.pem"), []byte("TOPSECRET\n"), 0o600)
		// Another name of the same file.
		os.Link(filepath.Join(ws, "secrets/deploy.pem"), filepath.Join(ws, "copy.pem.bak"))
		return ws
	}
	t.Run("plain", func(t *testing.T) {
		check(t, newWS("plain"), filepath.Join(f.dir, "plain.tar"))
	})
	t.Run("git-dirty", func(t *testing.T) {
		ws := newWS("gitdirty")
		mustRun(t, ws, "git", "init", "-q")
		mustRun(t, ws, "git", "add", "pinfold.yaml", "app.txt")
		mustRun(t, ws, "git", "-c", "user.email=t@example.org", "-c", "user.name=t", "commit", "-qm", "init")
		check(t, ws, filepath.Join(f.dir, "gitdirty.tar"), "--allow-dirty")
	})
	t.Run("git-committed", func(t *testing.T) {
		ws := newWS("gitcommitted")
		os.Remove(filepath.Join(ws, "copy.pem.bak"))
		mustRun(t, ws, "git", "init", "-q")
		mustRun(t, ws, "git", "add", ".")
		mustRun(t, ws, "git", "-c", "user.email=t@example.org", "-c", "user.name=t", "commit", "-qm", "init")
		out := filepath.Join(f.dir, "committed.tar")
		t.Setenv("PINFOLD_STORE", f.store)
		_, errs, code := pf(t, ws, "pack", "image", "--base", "tar:"+f.base, "--out", out)
		if code != 125 || !strings.Contains(errs, "PF178") || !strings.Contains(errs, "secrets/deploy.pem") {
			t.Errorf("a committed secret: %d %s", code, errs)
		}
		if _, err := os.Stat(out); err == nil {
			t.Error("a refused pack wrote its output")
		}
	})
}
