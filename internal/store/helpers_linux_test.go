package store

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// ent is one archive entry for the test archives.
type ent struct {
	hdr  tar.Header
	body string
}

func dir(name string, mode int64) ent {
	return ent{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, ModTime: testTime}}
}

func file(name string, mode int64, body string) ent {
	return ent{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body)), ModTime: testTime}, body: body}
}

func symlink(name, target string) ent {
	return ent{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, ModTime: testTime}}
}

func hardlink(name, target string) ent {
	return ent{hdr: tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target, ModTime: testTime}}
}

func special(typ byte, name string) ent {
	return ent{hdr: tar.Header{Typeflag: typ, Name: name, Mode: 0o600, Devmajor: 1, Devminor: 3, ModTime: testTime}}
}

var testTime = time.Date(2021, 3, 4, 5, 6, 7, 0, time.UTC)

// makeTar writes ents as a tar archive.
func makeTar(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := e.hdr
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("writing header %q: %v", h.Name, err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatalf("writing %q: %v", h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gzipBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// compressCLI compresses b with "tool -c", skipping the test when the tool
// is not installed.
func compressCLI(t testing.TB, tool string, b []byte) []byte {
	t.Helper()
	bin, err := exec.LookPath(tool)
	if err != nil {
		pkg := tool
		if tool == "xz" {
			pkg = "xz-utils"
		}
		t.Skipf("%s is not installed, so %s archives are not tested here (apt-get install %s)", tool, tool, pkg)
	}
	cmd := exec.Command(bin, "-c", "-q")
	cmd.Stdin = bytes.NewReader(b)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s -c: %v", tool, err)
	}
	return out
}

func writeArchive(t testing.TB, dir string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, "archive.bin") // no extension: formats are told by content
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func openStore(t testing.TB, dir string) *Store {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// listDir returns the names in dir, sorted; a missing dir is empty.
func listDir(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

// assertStoreEmpty checks that a failed import left nothing in the store.
func assertStoreEmpty(t testing.TB, s *Store) {
	t.Helper()
	for _, d := range []string{"tmp", "bases/tar", "index/tar"} {
		if names := listDir(t, filepath.Join(s.Dir(), d)); len(names) != 0 {
			t.Errorf("%s holds %v after a failed import", d, names)
		}
	}
}

// findNamed returns the paths below root, except below skip, whose base
// name is name.
func findNamed(t testing.TB, root, skip, name string) []string {
	t.Helper()
	var found []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if p == skip {
			return filepath.SkipDir
		}
		if err == nil && d.Name() == name {
			found = append(found, p)
		}
		return nil
	})
	return found
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
	before := count()
	t.Cleanup(func() {
		if after := count(); after > before {
			t.Errorf("%d file descriptors open after the test, %d before", after, before)
		}
	})
}
