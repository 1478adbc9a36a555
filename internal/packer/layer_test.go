package packer

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/pinfold/pinfold/internal/pack"
)

// TestLayerStaysInside: a listed file below a symbolic link is not read
// through the link, parents come before children, and times are clamped.
func TestLayerStaysInside(t *testing.T) {
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	outside := filepath.Join(dir, "outside")
	os.MkdirAll(filepath.Join(ws, "d"), 0o755)
	os.MkdirAll(outside, 0o755)
	os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644)
	os.WriteFile(filepath.Join(ws, "d/f"), []byte("f"), 0o644)
	os.Symlink(outside, filepath.Join(ws, "link"))
	epoch := time.Unix(1000, 0)
	l := pack.Layer{Dir: ws, Prefix: "app", Files: []string{"link/secret", "d/f", "link"}}
	fl, err := writeLayer(context.Background(), l, epoch, filepath.Join(dir, "layer"))
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(fl.path)
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(z)
	var names []string
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
		if !hdr.ModTime.Equal(epoch) || hdr.Uid != 0 || hdr.Uname != "" {
			t.Errorf("%s: time %v uid %d uname %q", hdr.Name, hdr.ModTime, hdr.Uid, hdr.Uname)
		}
	}
	if want := []string{"app/", "app/d/", "app/d/f", "app/link"}; !slices.Equal(names, want) {
		t.Errorf("entries %q, want %q", names, want)
	}
}
