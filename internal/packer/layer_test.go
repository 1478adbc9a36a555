package packer

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"golang.org/x/sys/unix"

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

// TestOverlayLayer: overlayfs upper directories become an OCI layer:
// whiteouts (even linked to one inode, as overlayfs makes them) become
// .wh. files, an opaque directory gets its marker, <top>/upper is <top>.
func TestOverlayLayer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("whiteouts are character devices: mknod needs root")
	}
	dir := t.TempDir()
	upper := filepath.Join(dir, "usr", "upper")
	os.MkdirAll(filepath.Join(upper, "lib", "opq"), 0o755)
	os.WriteFile(filepath.Join(upper, "lib", "new"), []byte("new"), 0o644)
	os.WriteFile(filepath.Join(upper, "lib", "opq", "kept"), []byte("k"), 0o644)
	if err := unix.Mknod(filepath.Join(upper, "lib", "gone"), unix.S_IFCHR|0o000, 0); err != nil {
		t.Fatal(err)
	}
	os.Link(filepath.Join(upper, "lib", "gone"), filepath.Join(upper, "lib", "gone2"))
	if err := unix.Setxattr(filepath.Join(upper, "lib", "opq"), "user.overlay.opaque", []byte("y"), 0); err != nil {
		t.Skipf("user xattrs: %v", err)
	}
	os.MkdirAll(filepath.Join(dir, "etc"), 0o755) // no upper: not in the image
	fl, err := writeLayer(context.Background(), pack.Layer{Dir: dir, Overlay: true}, time.Unix(1000, 0), filepath.Join(t.TempDir(), "layer"))
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(fl.path)
	defer f.Close()
	z, _ := gzip.NewReader(f)
	tr := tar.NewReader(z)
	var got []string
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %c", hdr.Name, hdr.Typeflag))
	}
	want := []string{"usr/ 5", "usr/lib/ 5", "usr/lib/.wh.gone 0", "usr/lib/.wh.gone2 0", "usr/lib/new 0",
		"usr/lib/opq/ 5", "usr/lib/opq/.wh..wh..opq 0", "usr/lib/opq/kept 0"}
	if !slices.Equal(got, want) {
		t.Errorf("entries\n%q\nwant\n%q", got, want)
	}
}
