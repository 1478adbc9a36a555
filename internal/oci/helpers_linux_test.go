package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/pinfold/pinfold/internal/tarentry/tartest"
)

// The test archives (see tartest).
type ent = tartest.Entry

var (
	testTime  = tartest.Time
	dir       = tartest.Dir
	file      = tartest.File
	symlink   = tartest.Symlink
	hardlink  = tartest.Hardlink
	owned     = tartest.Owned
	makeTar   = tartest.Tar
	gzipBytes = tartest.Gzip
)

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// run runs a command, failing the test with its output if it fails.
func run(t testing.TB, env []string, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// need skips the test when a command is not installed.
func need(t testing.TB, tool, pkg string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		t.Skipf("%s is not installed (apt-get install %s)", tool, pkg)
	}
}

// layer is a layer blob as stored and the digest of its tar.
type layer struct {
	blob      []byte
	mediaType string
	diffID    string
}

func plainLayer(tarball []byte) layer {
	return layer{blob: tarball, mediaType: mtLayerTar, diffID: digestOf(tarball)}
}

func gzipLayer(t testing.TB, tarball []byte) layer {
	return layer{blob: gzipBytes(t, tarball), mediaType: mtLayerGzip, diffID: digestOf(tarball)}
}

// layoutDir builds an OCI image layout by hand.
type layoutDir struct {
	t   testing.TB
	dir string
}

func newLayout(t testing.TB, dir string) *layoutDir {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`))
	return &layoutDir{t: t, dir: dir}
}

func writeFile(t testing.TB, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (l *layoutDir) blob(b []byte, mt string) descriptor {
	d := descriptor{MediaType: mt, Digest: digestOf(b), Size: int64(len(b))}
	writeFile(l.t, l.blobPath(d.Digest), b)
	return d
}

func (l *layoutDir) blobPath(digest string) string {
	return filepath.Join(l.dir, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:"))
}

func (l *layoutDir) json(v any, mt string) descriptor {
	b, err := json.Marshal(v)
	if err != nil {
		l.t.Fatal(err)
	}
	return l.blob(b, mt)
}

// image writes a config and a manifest for layers and returns the
// manifest's descriptor; arch "" is this machine's.
func (l *layoutDir) image(arch string, cfg map[string]any, layers ...layer) descriptor {
	if arch == "" {
		arch = runtime.GOARCH
	}
	var diffIDs []string
	var lds []descriptor
	for _, ly := range layers {
		diffIDs = append(diffIDs, ly.diffID)
		lds = append(lds, l.blob(ly.blob, ly.mediaType))
	}
	if diffIDs == nil {
		diffIDs = []string{}
		lds = []descriptor{}
	}
	c := l.json(map[string]any{
		"architecture": arch,
		"os":           "linux",
		"config":       cfg,
		"rootfs":       map[string]any{"type": "layers", "diff_ids": diffIDs},
	}, mtOCIConfig)
	return l.json(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mtOCIManifest,
		"config":        c,
		"layers":        lds,
	}, mtOCIManifest)
}

// index writes index.json.
func (l *layoutDir) index(ds ...descriptor) {
	b, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": mtOCIIndex, "manifests": ds})
	if err != nil {
		l.t.Fatal(err)
	}
	writeFile(l.t, filepath.Join(l.dir, "index.json"), b)
}

func named(d descriptor, ref string) descriptor {
	d.Annotations = map[string]string{annotRefName: ref}
	return d
}

func onPlatform(d descriptor, arch string) descriptor {
	d.Platform = &platform{OS: "linux", Architecture: arch}
	return d
}

// oneImage writes a layout holding one image of layers, named "v1".
func oneImage(t testing.TB, layers ...layer) string {
	t.Helper()
	l := newLayout(t, filepath.Join(t.TempDir(), "layout"))
	l.index(named(l.image("", nil, layers...), "v1"))
	return l.dir
}

// applyTo opens the image at src and applies it to a new directory.
func applyTo(t testing.TB, src, ref string, opt ApplyOptions) (string, *Image, ApplyStats, error) {
	t.Helper()
	img, err := Open(context.Background(), src, ref)
	if err != nil {
		t.Fatalf("Open(%s): %v", src, err)
	}
	root := filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	st, err := Apply(context.Background(), img, root, opt)
	return root, img, st, err
}

// listTree describes every path below root, one line each, sorted: type,
// permission bits, and content digest or link target; with owners, uid and
// gid too.
func listTree(t testing.TB, root string, owners bool) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s %s", rel, fi.Mode())
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" %q", b)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			line += " -> " + target
		}
		if owners {
			st := fi.Sys().(*syscall.Stat_t)
			line += fmt.Sprintf(" %d:%d", st.Uid, st.Gid)
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func isRoot() bool { return os.Geteuid() == 0 }

// checkFDs fails the test if it ends with more open file descriptors than
// it started with.
func checkFDs(t *testing.T) {
	t.Helper()
	count := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	// The runtime's poller keeps two descriptors once started: start it.
	if r, w, err := os.Pipe(); err == nil {
		r.Close()
		w.Close()
	}
	before := count()
	t.Cleanup(func() {
		if after := count(); after > before {
			t.Errorf("%d file descriptors open after the test, %d before", after, before)
		}
	})
}
