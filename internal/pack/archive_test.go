package pack

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// writeApp writes an app archive whose entries are given in order, with
// a long-named entry first (a PAX header) so that offsets are not
// multiples of one header.
func writeApp(t *testing.T, entries [][2]string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "a.pinfold")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	long := strings.Repeat("long/", 40) + "name"
	all := append([][2]string{{long, "x"}}, entries...)
	for _, e := range all {
		if err := tw.WriteHeader(&tar.Header{Name: e[0], Mode: 0o644, Size: int64(len(e[1])), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e[1]))
	}
	tw.Close()
	f.Close()
	return p
}

func TestReadAppRoot(t *testing.T) {
	layer, config, root := "layer bytes", `{"config":{}}`, strings.Repeat("squashfs ", 1000)
	m, _ := json.Marshal(Manifest{Config: Descriptor{Digest: digestOf([]byte(config))},
		Layers: []Descriptor{{Digest: digestOf([]byte(layer))}}})
	index, _ := json.Marshal(map[string]any{"manifests": []Descriptor{{Digest: digestOf(m)}}})
	meta, _ := json.Marshal(AppMeta{Format: AppFormat, Root: &RootImage{Digest: digestOf([]byte(root)), Size: int64(len(root)),
		Top: []RootEntry{{Name: "bin", Type: "dir", Mode: 0o755}}}})
	blob := func(s string) [2]string {
		return [2]string{"blobs/sha256/" + strings.TrimPrefix(digestOf([]byte(s)), "sha256:"), s}
	}
	good := [][2]string{blob(layer), blob(config), blob(string(m)), {"index.json", string(index)},
		{RootFile, root}, {MetaFile, string(meta)}}

	open := func(p string) (*os.File, *AppRoot) {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		r, err := ReadAppRoot(f)
		if err != nil || r == nil {
			t.Fatalf("ReadAppRoot: %v %v", r, err)
		}
		return f, r
	}
	f, r := open(writeApp(t, good))
	got := make([]byte, len(root))
	if _, err := f.ReadAt(got, r.Offset); err != nil || string(got) != root {
		t.Errorf("the root image is not at offset %d", r.Offset)
	}
	if err := r.Verify(f); err != nil {
		t.Errorf("Verify: %v", err)
	}
	if cd, err := r.ConfigDigest(f); err != nil || cd != digestOf([]byte(config)) {
		t.Errorf("ConfigDigest: %s %v", cd, err)
	}
	if len(r.Top) != 1 || r.Top[0].Name != "bin" {
		t.Errorf("top: %+v", r.Top)
	}

	for _, c := range []struct {
		name string
		i    int
		data string
	}{
		{"a changed layer", 0, "layer bytez"},
		{"a changed config", 1, `{"config":{"x":1}}`},
		{"a changed root image", 4, strings.Replace(root, "squashfs", "squashfz", 1)},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := append([][2]string(nil), good...)
			bad[c.i][1] = c.data
			f, r := open(writeApp(t, bad))
			if err := r.Verify(f); !errors.Is(err, ErrDigest) {
				t.Errorf("Verify: %v, want ErrDigest", err)
			}
		})
	}
	// No root image, or one whose size is not what pinfold.json says.
	f2, err := os.Open(writeApp(t, good[:4]))
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	if r, err := ReadAppRoot(f2); r != nil || err != nil {
		t.Errorf("an app without a root image: %v %v", r, err)
	}
	short := append([][2]string(nil), good...)
	short[4][1] = root[:100]
	f3, err := os.Open(writeApp(t, short))
	if err != nil {
		t.Fatal(err)
	}
	defer f3.Close()
	if _, err := ReadAppRoot(f3); err == nil {
		t.Error("a root image of another size than pinfold.json says was read")
	}
}
