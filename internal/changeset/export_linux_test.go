package changeset

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestExportRoundTrip(t *testing.T) {
	o := basicOverlay(t)
	es := o.scan(t)
	var a, b bytes.Buffer
	if err := Export(&a, o.roots(), es); err != nil {
		t.Fatal(err)
	}
	if err := Export(&b, o.roots(), es); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two exports of one changeset differ")
	}
	got, err := ReadLayer(bytes.NewReader(a.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	base := strings.TrimPrefix(o.lower, "/") + "/"
	var list []string
	byPath := make(map[string]LayerEntry)
	for _, e := range got {
		if !strings.HasPrefix(e.Path, base) {
			if !e.Mode.IsDir() || !strings.HasPrefix(base, e.Path+"/") {
				t.Errorf("entry %q outside %s and not one of its parents", e.Path, base)
			}
			continue
		}
		rel := strings.TrimPrefix(e.Path, base)
		s := rel
		switch {
		case e.Whiteout:
			s = "whiteout " + rel
		case e.Opaque:
			s = "opaque " + rel
		case e.Type == tar.TypeLink:
			s += " link to " + strings.TrimPrefix(e.Link, base)
		}
		list = append(list, s)
		byPath[rel] = e
		if e.UID != 0 || e.GID != 0 {
			t.Errorf("%s owned by %d:%d", rel, e.UID, e.GID)
		}
	}
	want := []string{"whiteout d", "whiteout gone", "whiteout old", "added", "d2f", "edit", "empty", "emptydir", "f2d", "f2d/in", "f2l",
		"h1", "h2 link to h1", "link", "new", "new/deep", "new/deep/er", "new/deep/er/file",
		"r", "opaque r", "r/w", "r/y", "renamed", "ro", "script"}
	if strings.Join(list, "\n") != strings.Join(want, "\n") {
		t.Errorf("layer:\n%s\nwant:\n%s", strings.Join(list, "\n"), strings.Join(want, "\n"))
	}
	for _, p := range []string{"edit", "r/y", "new/deep/er/file"} {
		data, err := os.ReadFile(filepath.Join(o.upper, p))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		if d := byPath[p].Digest; d != "sha256:"+hex.EncodeToString(sum[:]) {
			t.Errorf("%s: digest %s", p, d)
		}
	}
	if e := byPath["script"]; e.Mode.Perm() != 0o755 {
		t.Errorf("script mode %v", e.Mode)
	}
	if e := byPath["link"]; e.Link != "edit" {
		t.Errorf("link -> %q", e.Link)
	}
}

// The directories a layer only implies (the workspace's parents) carry no
// time of the host's: making a file beside the workspace must not change
// the bytes of the next export.
func TestExportStableAcrossHostChanges(t *testing.T) {
	o := basicOverlay(t)
	es := o.scan(t)
	var a, b bytes.Buffer
	if err := Export(&a, o.roots(), es); err != nil {
		t.Fatal(err)
	}
	parent := filepath.Dir(o.lower)
	if err := os.WriteFile(filepath.Join(parent, "beside"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	os.Chtimes(parent, old, old)
	if err := Export(&b, o.roots(), es); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("an export changed after a file was made beside the workspace")
	}
}
