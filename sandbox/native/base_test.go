package native_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/native"
)

// rootfs makes a minimal root filesystem: the static attacker as /bin/app,
// an /etc/passwd, and a symlink /usr/bin -> /bin.
func rootfs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	app, err := os.ReadFile(filepath.Join(attackerDir, "attacker"))
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "bin"), 0o755)
	os.MkdirAll(filepath.Join(dir, "etc"), 0o755)
	os.MkdirAll(filepath.Join(dir, "usr"), 0o755)
	os.WriteFile(filepath.Join(dir, "bin", "app"), app, 0o755)
	os.WriteFile(filepath.Join(dir, "etc", "passwd"), []byte("root:x:0:0::/:/bin/app\n"), 0o644)
	os.Symlink("/bin", filepath.Join(dir, "usr", "bin"))
	return dir
}

func TestDirBase(t *testing.T) {
	spec := sandbox.Spec{Base: sandbox.Base{Kind: sandbox.BaseDir, Path: rootfs(t)}, Workspace: t.TempDir()}
	app := func(args ...string) map[string]probe {
		_, out, _ := run(t, spec, &sandbox.Cmd{Args: append([]string{"/bin/app"}, args...)})
		return parseProbes(t, out)
	}
	got := strings.Fields(app("ls", "/")["ls /"].Out)
	slices.Sort(got)
	want := []string{"bin", "dev", "etc", "proc", "sys", "tmp", "usr"}
	// The workspace (under /tmp) and the base's entries, nothing of the host.
	if !slices.Equal(got, want) {
		t.Errorf("root has %v, want %v", got, want)
	}
	if r := app("read", "/etc/passwd")["read /etc/passwd"]; !strings.HasPrefix(r.Out, "root:x:0:0::/:/bin/app") {
		t.Errorf("the base's /etc/passwd: %+v", r)
	}
	want2 := app("write", "/bin/app")
	if want2["write /bin/app"].Err != "EROFS" {
		t.Errorf("base writable: %+v", want2)
	}
}

func TestTarBase(t *testing.T) {
	root := rootfs(t)
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	filepath.Walk(root, func(path string, fi os.FileInfo, err error) error {
		if err != nil || path == root {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		link := ""
		if fi.Mode()&os.ModeSymlink != 0 {
			link, _ = os.Readlink(path)
		}
		h, _ := tar.FileInfoHeader(fi, link)
		h.Name = rel
		tw.WriteHeader(h)
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(path)
			tw.Write(b)
		}
		return nil
	})
	tw.Close()
	gz.Close()
	archive := filepath.Join(t.TempDir(), "root.tar.gz")
	os.WriteFile(archive, buf.Bytes(), 0o644)
	spec, store := sandbox.Spec{Base: sandbox.Base{Kind: sandbox.BaseTar, Path: archive}, Workspace: t.TempDir()}, t.TempDir()
	for i := 0; i < 2; i++ { // the second run reuses the extracted base
		res, out, errs := run(t, spec, &sandbox.Cmd{Args: []string{"/usr/bin/app", "read", "/etc/passwd"}}, native.WithStore(store))
		if res.ExitCode != 0 || !strings.Contains(out, "root:x:0:0") {
			t.Fatalf("run %d: %d %q %q", i, res.ExitCode, out, errs)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(store, "bases", "tar"))
	if len(ents) != 1 {
		t.Errorf("store holds %d bases, want 1", len(ents))
	}
}
