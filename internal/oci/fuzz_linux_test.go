package oci

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// Images from anyone: a pulled archive, a layout a tool wrote. Open and
// Apply must refuse what they cannot read without panicking, in bounded
// time, reading nothing outside what they were given and writing nothing
// outside the root.

// bounded runs f and fails the fuzz input if it takes more than a while.
func bounded(t *testing.T, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("did not finish in 30 s")
	}
}

// readLayers reads every layer to its end, or its error.
func readLayers(t *testing.T, img *Image) {
	for _, l := range img.Layers {
		r, err := l.Open()
		if err != nil {
			continue
		}
		io.Copy(io.Discard, io.LimitReader(r, 64<<20))
		r.Close()
	}
}

// applyFuzzed applies img to a fresh root in dir, with small limits, and
// fails if anything changed in dir outside the root.
func applyFuzzed(t *testing.T, dir string, img *Image) {
	root := filepath.Join(dir, "root")
	os.RemoveAll(root)
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	before := listTree(t, dir, false)
	Apply(context.Background(), img, root, ApplyOptions{MaxBytes: 4 << 20, MaxEntries: 10_000})
	after := listTree(t, dir, false)
	var outside []string
	for _, p := range after {
		name := strings.Fields(p)[0]
		if name != "root" && !strings.HasPrefix(name, "root/") && !slices.Contains(before, p) {
			outside = append(outside, p)
		}
	}
	if len(outside) > 0 {
		t.Fatalf("applying wrote outside the root: %q", outside)
	}
	os.RemoveAll(root)
}

// tarTree is a tar of the files below dir (the form of an oci-archive).
func tarTree(tb testing.TB, dir string) []byte {
	var ents []ent
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			ents = append(ents, ent(tarDirEntry(rel+"/")))
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		ents = append(ents, file(rel, 0o644, string(b)))
		return nil
	})
	return makeTar(tb, ents...)
}

func tarDirEntry(name string) ent { return dir(name, 0o755) }

// FuzzOpenArchive feeds Open archives: docker-archive and oci-archive
// seeds, mutated.
func FuzzOpenArchive(f *testing.F) {
	layerTar := makeTar(f, dir("etc/", 0o755), file("etc/motd", 0o644, "hi"), symlink("bin", "usr/bin"),
		file("usr/bin/tool", 0o755, "#!/bin/sh\n"), file("etc/.wh.old", 0o644, ""), hardlink("etc/motd2", "etc/motd"))
	// docker-archive
	cfg, _ := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH, "os": "linux", "config": map[string]any{"Cmd": []string{"/bin/sh"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{digestOf(layerTar)}},
	})
	cfgName := strings.TrimPrefix(digestOf(cfg), "sha256:") + ".json"
	m, _ := json.Marshal([]dockerImage{{Config: cfgName, RepoTags: []string{"pinfold/fuzz:v1"}, Layers: []string{"aaaa/layer.tar"}}})
	f.Add(makeTar(f, dir("aaaa/", 0o755), file("aaaa/layer.tar", 0o644, string(layerTar)),
		file(cfgName, 0o644, string(cfg)), file("manifest.json", 0o644, string(m))))
	f.Add(makeTar(f, file("manifest.json", 0o644, `[{"Config":"../../etc/passwd","Layers":["/etc/shadow"]}]`)))
	// oci-archive, plain and gzip layers
	l := newLayout(f, filepath.Join(f.TempDir(), "layout"))
	l.index(named(l.image("", map[string]any{"Env": []string{"A=1"}}, plainLayer(layerTar), gzipLayer(f, layerTar)), "v1"))
	f.Add(tarTree(f, l.dir))

	work := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(work, "image.tar")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		var img *Image
		var err error
		bounded(t, func() {
			if img, err = Open(context.Background(), p, ""); err == nil {
				readLayers(t, img)
			}
		})
		if err != nil {
			return
		}
		if img.Source != p || (img.Format != "docker-archive" && img.Format != "oci-archive") {
			t.Fatalf("opened as %q from %q", img.Format, img.Source)
		}
		bounded(t, func() { applyFuzzed(t, work, img) })
	})
}

// FuzzOpenLayout feeds Open a layout directory's index.json. The layout
// holds one image; another image's blobs lie beside it, outside: an
// index that reaches them must not open.
func FuzzOpenLayout(f *testing.F) {
	base := f.TempDir()
	layerTar := makeTar(f, file("inside", 0o644, "in"))
	l := newLayout(f, filepath.Join(base, "layout"))
	in := named(l.image("", nil, plainLayer(layerTar)), "v1")
	out := newLayout(f, filepath.Join(base, "outside"))
	theirs := named(out.image("", nil, plainLayer(makeTar(f, file("outside", 0o644, "out")))), "v2")
	for i, ds := range [][]descriptor{{in}, {theirs}, {in, theirs}, {onPlatform(in, runtime.GOARCH)}} {
		b, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": mtOCIIndex, "manifests": ds})
		f.Add(b)
		// The seeds reach both ends: the image inside opens, the one
		// outside does not.
		writeFile(f, filepath.Join(l.dir, "index.json"), b)
		if _, err := Open(context.Background(), l.dir, ""); (err == nil) != (i != 1 && i != 2) {
			f.Fatalf("seed %d: %v", i, err)
		}
	}
	f.Add([]byte(`{"schemaVersion":2,"manifests":[{"mediaType":"` + mtOCIManifest + `","digest":"sha256:../../outside/blobs/sha256/x","size":1}]}`))
	inside := func(digest string) bool {
		alg, hex, err := parseDigest(digest)
		if err != nil {
			return false
		}
		_, err = os.Lstat(filepath.Join(l.dir, "blobs", alg, hex))
		return err == nil
	}
	f.Fuzz(func(t *testing.T, index []byte) {
		writeFile(t, filepath.Join(l.dir, "index.json"), index)
		var img *Image
		var err error
		bounded(t, func() { img, err = Open(context.Background(), l.dir, "") })
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatal(err)
			}
			return
		}
		digests := []string{img.ManifestDigest, img.ConfigDigest}
		for _, ly := range img.Layers {
			digests = append(digests, ly.Digest)
		}
		for _, d := range digests {
			if !inside(d) {
				t.Fatalf("opened with %s, which is not in the layout", d)
			}
		}
		bounded(t, func() { readLayers(t, img) })
	})
}
