package changeset

import (
	"archive/tar"
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func FuzzReadLayer(f *testing.F) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range []*tar.Header{
		{Name: "a/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "a/.wh..wh..opq", Typeflag: tar.TypeReg},
		{Name: "a/.wh.gone", Typeflag: tar.TypeReg},
		{Name: "a/f", Typeflag: tar.TypeReg, Size: 3, Mode: 0o644},
		{Name: "a/l", Typeflag: tar.TypeSymlink, Linkname: "../x"},
		{Name: "a/h", Typeflag: tar.TypeLink, Linkname: "a/f"},
	} {
		tw.WriteHeader(h)
		if h.Size > 0 {
			tw.Write([]byte("abc"))
		}
	}
	tw.Close()
	f.Add(b.Bytes())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		es, err := ReadLayer(bytes.NewReader(data))
		if err != nil {
			return
		}
		for _, e := range es {
			if !(e.Path == "." && e.Opaque) && !filepath.IsLocal(e.Path) || strings.Contains(e.Path, "\x00") {
				t.Fatalf("ReadLayer returned the escaping path %q", e.Path)
			}
			if e.Type == tar.TypeLink && !filepath.IsLocal(e.Link) {
				t.Fatalf("ReadLayer returned a hard link to %q", e.Link)
			}
		}
	})
}

func TestReadLayerRefuses(t *testing.T) {
	for _, h := range []*tar.Header{
		{Name: "../x", Typeflag: tar.TypeReg},
		{Name: "a/../../x", Typeflag: tar.TypeReg},
		{Name: "/etc/passwd", Typeflag: tar.TypeReg},
		{Name: "a/.wh.", Typeflag: tar.TypeReg},
		{Name: "a/.wh...", Typeflag: tar.TypeReg},
		{Name: "h", Typeflag: tar.TypeLink, Linkname: "../../etc/shadow"},
		{Name: "h", Typeflag: tar.TypeLink, Linkname: "/etc/shadow"},
		{Name: ".", Typeflag: tar.TypeReg},
	} {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Close()
		if _, err := ReadLayer(&b); !errors.Is(err, ErrBadLayer) {
			t.Errorf("%s %q -> %q: %v, want ErrBadLayer", string(h.Typeflag), h.Name, h.Linkname, err)
		}
	}
	// A header claiming a huge size with no data is an error, not a hang.
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: 1 << 40})
	if _, err := ReadLayer(bytes.NewReader(b.Bytes())); !errors.Is(err, ErrBadLayer) {
		t.Errorf("huge size: %v", err)
	}
}
