package packer

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
)

type entry struct {
	name, data string
	typ        byte
}

// gzLayer writes the entries as a gzip tar layer.
func gzLayer(t *testing.T, dir string, n int, ents []entry) *fileLayer {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range ents {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: 0o644, ModTime: time.Unix(1000, 0)}
		switch e.typ {
		case tar.TypeDir:
			hdr.Mode = 0o755
		case tar.TypeSymlink, tar.TypeLink:
			hdr.Linkname = e.data
		default:
			hdr.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			tw.Write([]byte(e.data))
		}
	}
	tw.Close()
	zw.Close()
	p := filepath.Join(dir, "layer"+string(rune('0'+n)))
	if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return &fileLayer{path: p}
}

func TestMergeLayers(t *testing.T) {
	dir := t.TempDir()
	layers := []*fileLayer{
		gzLayer(t, dir, 0, []entry{
			{"etc/", "", tar.TypeDir}, {"etc/a", "a0", tar.TypeReg}, {"etc/gone", "g", tar.TypeReg},
			{"opq/", "", tar.TypeDir}, {"opq/old", "o", tar.TypeReg},
			{"d/", "", tar.TypeDir}, {"d/sub/", "", tar.TypeDir}, {"d/sub/f", "f", tar.TypeReg},
			{"bin", "usr/bin", tar.TypeSymlink}, {"usr/", "", tar.TypeDir}, {"usr/bin/", "", tar.TypeDir},
		}),
		gzLayer(t, dir, 1, []entry{
			{"etc/", "", tar.TypeDir}, {"etc/a", "a1", tar.TypeReg}, {"etc/.wh.gone", "", tar.TypeReg},
			{"opq/", "", tar.TypeDir}, {"opq/.wh..wh..opq", "", tar.TypeReg}, {"opq/new", "n", tar.TypeReg},
			{"d", "now a file", tar.TypeReg},
			{"usr/bin/x", "x", tar.TypeReg}, {"usr/bin/y", "usr/bin/x", tar.TypeLink},
		}),
	}
	final, err := mergeLayers(context.Background(), layers)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := writeMerged(context.Background(), layers, final, &out); err != nil {
		t.Fatal(err)
	}
	var got []string
	tr := tar.NewReader(&out)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got = append(got, hdr.Name+"="+string(b)+hdr.Linkname)
	}
	want := []string{"etc/=", "opq/=", "bin=usr/bin", "usr/=", "usr/bin/=", "etc/a=a1", "opq/new=n", "d=now a file",
		"usr/bin/x=x", "usr/bin/y=usr/bin/x"}
	if !slices.Equal(got, want) {
		t.Errorf("merged:\n got %q\nwant %q", got, want)
	}
	top := topEntries(final)
	var names []string
	for _, e := range top {
		names = append(names, e.Name+":"+e.Type)
	}
	if strings.Join(names, " ") != "bin:symlink d:file etc:dir opq:dir usr:dir" {
		t.Errorf("top: %v", names)
	}
}

// TestRootImageIsDeterministic writes the root image of the same layers
// twice, once with sqfstar on one CPU: the bytes are the same.
func TestRootImageIsDeterministic(t *testing.T) {
	if _, err := exec.LookPath("sqfstar"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("sqfstar is not installed (scripts/test-setup.sh installs squashfs-tools)")
		}
		t.Skip("no sqfstar")
	}
	dir := t.TempDir()
	var ents []entry
	for i := 0; i < 300; i++ {
		d := "d" + string(rune('a'+i%20)) + "/"
		if i < 20 {
			ents = append(ents, entry{d, "", tar.TypeDir})
		}
		ents = append(ents, entry{d + "f" + strings.Repeat("x", i%7) + string(rune('a'+i/20)), strings.Repeat("data", i*50), tar.TypeReg})
	}
	// Identical files of several blocks: duplicate detection in sqfstar
	// depends on its threads' timing.
	for i := 0; i < 6; i++ {
		ents = append(ents, entry{"da/dup" + string(rune('a'+i)), strings.Repeat("same block ", 30000), tar.TypeReg})
	}
	layers := []*fileLayer{gzLayer(t, dir, 0, ents)}
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000") // as pack image sets it: sqfstar must not see it
	epoch := time.Unix(1700000000, 0)
	var images [][]byte
	for i, cpus := range []string{"", "0"} {
		if cpus != "" {
			// sqfstar 4.5 stamps the root with the time it runs: another
			// second must not show.
			time.Sleep(1100 * time.Millisecond)
			if _, err := exec.LookPath("taskset"); err != nil {
				continue
			}
			// sqfstar sizes its threads by the CPUs it may run on.
			bin := filepath.Join(dir, "bin")
			os.MkdirAll(bin, 0o755)
			real, _ := exec.LookPath("sqfstar")
			os.WriteFile(filepath.Join(bin, "sqfstar"), []byte("#!/bin/sh\nexec taskset -c "+cpus+" "+real+" \"$@\"\n"), 0o755)
			t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
		}
		file := filepath.Join(dir, "root"+string(rune('0'+i)))
		r, err := writeRoot(context.Background(), layers, epoch, file)
		if err != nil || r == nil {
			t.Fatalf("writeRoot: %v %v", r, err)
		}
		b, _ := os.ReadFile(file)
		images = append(images, b)
	}
	if len(images) == 2 && !bytes.Equal(images[0], images[1]) {
		for i := range images[0] {
			if i < len(images[1]) && images[0][i] != images[1][i] {
				t.Errorf("first difference at byte %d of %d: %#x %#x", i, len(images[0]), images[0][i], images[1][i])
				break
			}
		}
		t.Error("two root images of the same layers differ")
	}
}
