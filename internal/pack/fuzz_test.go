package pack

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// appBytes is an app file: blobs, index, root image and pinfold.json, in
// the order given, the first entry long-named (a PAX header).
func appBytes(tb testing.TB, extra ...[2]string) []byte {
	layer, config, root := "layer bytes", `{"config":{"Cmd":["/bin/sh"]}}`, strings.Repeat("squashfs ", 100)
	m, _ := json.Marshal(Manifest{Config: Descriptor{Digest: digestOf([]byte(config))},
		Layers: []Descriptor{{Digest: digestOf([]byte(layer))}}})
	index, _ := json.Marshal(map[string]any{"manifests": []Descriptor{{Digest: digestOf(m)}}})
	meta, _ := json.Marshal(AppMeta{Format: AppFormat, Root: &RootImage{Digest: digestOf([]byte(root)), Size: int64(len(root)),
		Top: []RootEntry{{Name: "bin", Type: "dir", Mode: 0o755}}}})
	blob := func(s string) [2]string {
		return [2]string{"blobs/sha256/" + strings.TrimPrefix(digestOf([]byte(s)), "sha256:"), s}
	}
	ents := append([][2]string{{strings.Repeat("long/", 40) + "name", "x"}, blob(layer), blob(config), blob(string(m)),
		{"index.json", string(index)}, {RootFile, root}, {MetaFile, string(meta)}}, extra...)
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range ents {
		if err := tw.WriteHeader(&tar.Header{Name: e[0], Mode: 0o644, Size: int64(len(e[1])), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			tb.Fatal(err)
		}
		tw.Write([]byte(e[1]))
	}
	tw.Close()
	return b.Bytes()
}

func addAppSeeds(f *testing.F) {
	good := appBytes(f)
	f.Add(good)
	sig, _ := json.Marshal(Signature{Payload: []byte(`{"critical":{"image":{"docker-manifest-digest":"sha256:00"}}}`), Signature: []byte("sig")})
	f.Add(appBytes(f, [2]string{SignatureFile, string(sig)}, [2]string{"manifest.json", `[{"Config":"blobs/sha256/x","Layers":[]}]`}))
	f.Add(good[:len(good)/2])
	f.Add(appBytes(f, [2]string{MetaFile, `{"format":"pinfold-app/1","root":{"size":-1}}`}))
}

// boundedPack fails the input if f takes more than a while.
func boundedPack(t *testing.T, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("did not finish in 30 s")
	}
}

// FuzzReadArchive: a .pinfold file from anyone is read or refused without
// panicking, and what is read has the manifest and config its digests
// name. (Verification lives in internal/trust, which imports this
// package: its own tests check that nothing verifies without a key.)
func FuzzReadArchive(f *testing.F) {
	addAppSeeds(f)
	p := filepath.Join(f.TempDir(), "a.pinfold")
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		var a *Archive
		var err error
		boundedPack(t, func() { a, err = ReadArchive(p) })
		if err != nil {
			return
		}
		if _, err := blobName(a.Digest); err != nil {
			t.Fatalf("read with a manifest digest %q", a.Digest)
		}
		if _, err := blobName(a.Manifest.Config.Digest); err != nil {
			t.Fatalf("read with a config digest %q", a.Manifest.Config.Digest)
		}
	})
}

// FuzzReadAppRoot: the root image an app file is found to have lies in
// the file, and one that verifies has the digest pinfold.json gives it.
func FuzzReadAppRoot(f *testing.F) {
	addAppSeeds(f)
	p := filepath.Join(f.TempDir(), "a.pinfold")
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		fl, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer fl.Close()
		var r *AppRoot
		boundedPack(t, func() { r, err = ReadAppRoot(fl) })
		if err != nil || r == nil {
			return
		}
		if r.Offset < 0 || r.Size < 0 || r.Offset+r.Size > int64(len(b)) {
			t.Fatalf("a root image of %d bytes at %d, in a file of %d", r.Size, r.Offset, len(b))
		}
		for d, at := range r.blobs {
			if at[0] < 0 || at[1] < 0 || at[0]+at[1] > int64(len(b)) {
				t.Fatalf("blob %s at %v, in a file of %d", d, at, len(b))
			}
		}
		var verr error
		boundedPack(t, func() { verr = r.Verify(fl) })
		if verr != nil {
			return
		}
		sum := sha256.Sum256(b[r.Offset : r.Offset+r.Size])
		if "sha256:"+hex.EncodeToString(sum[:]) != r.Digest {
			t.Fatalf("verified a root image whose digest is not %s", r.Digest)
		}
		if _, err := r.ConfigDigest(fl); err != nil {
			t.Fatalf("verified, but the config digest is not read: %v", err)
		}
	})
}
