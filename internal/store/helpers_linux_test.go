package store

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	special   = tartest.Special
	makeTar   = tartest.Tar
	gzipBytes = tartest.Gzip
)

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
