package changeset

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the test mounts an overlay (run as root, as CI does)")
	}
}

// overlay is a real overlay: a lower directory the test fills, an upper
// and a work directory, and a mount point used only while a script runs.
type overlay struct {
	dir, lower, upper, work, mnt string
}

func newOverlay(t testing.TB) *overlay {
	t.Helper()
	requireRoot(t)
	d := t.TempDir()
	o := &overlay{dir: d, lower: filepath.Join(d, "lower"), upper: filepath.Join(d, "upper"),
		work: filepath.Join(d, "work"), mnt: filepath.Join(d, "mnt")}
	for _, p := range []string{o.lower, o.upper, o.work, o.mnt} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return o
}

// sh runs a shell script in dir.
func sh(t testing.TB, dir, script string) {
	t.Helper()
	cmd := exec.Command("sh", "-ec", script)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sh -c %q in %s: %v\n%s", script, dir, err, out)
	}
}

// mount mounts the overlay and returns a function that unmounts it.
func (o *overlay) mount(t testing.TB) func() {
	t.Helper()
	opts := "lowerdir=" + o.lower + ",upperdir=" + o.upper + ",workdir=" + o.work + ",userxattr"
	if err := unix.Mount("overlay", o.mnt, "overlay", 0, opts); err != nil {
		t.Fatalf("mounting overlay (%s): %v", opts, err)
	}
	mounted := true
	umount := func() {
		if !mounted {
			return
		}
		mounted = false
		for i := 0; ; i++ {
			err := unix.Unmount(o.mnt, 0)
			if err == nil || err == unix.EINVAL {
				return
			}
			if i == 50 {
				unix.Unmount(o.mnt, unix.MNT_DETACH)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Cleanup(umount)
	return umount
}

// inside runs script in the mounted overlay, then unmounts it.
func (o *overlay) inside(t testing.TB, script string) {
	t.Helper()
	umount := o.mount(t)
	defer umount()
	sh(t, o.mnt, script)
}

func (o *overlay) roots() []Root { return []Root{{Lower: o.lower, Upper: o.upper}} }

func (o *overlay) scan(t testing.TB) []Entry {
	t.Helper()
	es, err := Scan(context.Background(), o.roots())
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// summary renders entries as "kind path" lines for comparisons.
func summary(es []Entry) string {
	var b strings.Builder
	for _, e := range es {
		b.WriteString(string(e.Kind))
		b.WriteByte(' ')
		b.WriteString(e.Path)
		if e.IsDir() {
			b.WriteByte('/')
		}
		if e.TypeChanged() {
			b.WriteString(" (type)")
		}
		if e.Opaque {
			b.WriteString(" (opaque)")
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func writeFile(t testing.TB, path, data string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func readString(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// tree describes every path below dir: type, permission bits, content or
// symlink target; the order is the walk's.
func tree(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := make(map[string]string)
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		desc := fi.Mode().String()
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += " " + string(b)
		case fi.Mode()&os.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + l
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// merged is the tree the overlay shows.
func (o *overlay) merged(t testing.TB) map[string]string {
	t.Helper()
	umount := o.mount(t)
	defer umount()
	return tree(t, o.mnt)
}

func diffTrees(t testing.TB, got, want map[string]string) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("%q missing (want %.60q)", k, w)
		} else if g != w {
			t.Errorf("%q = %.80q, want %.80q", k, g, w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%q unexpected (%.60q)", k, g)
		}
	}
}
