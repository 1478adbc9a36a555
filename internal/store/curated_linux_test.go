package store

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(body, "->") {
			if err := os.Symlink(body[2:], p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTreeDigest(t *testing.T) {
	files := map[string]string{"etc/os-release": "ID=test\n", "usr/bin/tool": "#!/bin/sh\n", "bin": "->usr/bin",
		"etc/apt/sources.list": "deb http://mirror.one/debian bookworm main\n"}
	a, b := t.TempDir(), t.TempDir()
	writeTree(t, a, files)
	writeTree(t, b, files)
	// Times and the machine's mirror are not content.
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	os.Chtimes(filepath.Join(b, "etc/os-release"), old, old)
	os.WriteFile(filepath.Join(b, "etc/apt/sources.list"), []byte("deb http://mirror.two/debian bookworm main\n"), 0o644)
	da, err := TreeDigest(a, debianUnhashed)
	if err != nil {
		t.Fatal(err)
	}
	db, _ := TreeDigest(b, debianUnhashed)
	if da != db || !strings.HasPrefix(da, "sha256:") {
		t.Fatalf("same content, different digests: %s %s", da, db)
	}
	for _, change := range []func(){
		func() { os.WriteFile(filepath.Join(b, "etc/os-release"), []byte("ID=other\n"), 0o644) },
		func() { os.Chmod(filepath.Join(b, "usr/bin/tool"), 0o755) },
		func() { os.Remove(filepath.Join(b, "bin")); os.Symlink("usr/sbin", filepath.Join(b, "bin")) },
		func() { os.WriteFile(filepath.Join(b, "etc/new"), nil, 0o644) },
	} {
		change()
		d, _ := TreeDigest(b, debianUnhashed)
		if d == da {
			t.Errorf("a change left the digest at %s", d)
		}
		da = d
	}
}

func TestAptMirror(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"etc/apt/sources.list":                      "# none here\ndeb [arch=amd64 signed-by=/k.gpg] http://one.example/debian bookworm-updates main\n",
		"etc/apt/sources.list.d/a-disabled.sources": "Types: deb\nURIs: http://off.example/debian\nSuites: bookworm\nComponents: main\nEnabled: no\n",
		"etc/apt/sources.list.d/b-src.sources":      "Types: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\n",
		"etc/apt/sources.list.d/c.sources": "Types: deb\n# a comment\nURIs: http://mirror.example/debian/\n  http://second.example/debian\n" +
			"Suites: bookworm bookworm-updates\nComponents: main\n\nTypes: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n",
	})
	got, err := AptMirror(root, "bookworm")
	if err != nil || got != "http://mirror.example/debian" {
		t.Errorf("AptMirror = %q, %v", got, err)
	}
	writeTree(t, root, map[string]string{"etc/apt/sources.list": "deb [trusted=yes] http://first.example/debian bookworm main contrib\n"})
	if got, _ := AptMirror(root, "bookworm"); got != "http://first.example/debian" {
		t.Errorf("sources.list comes first: got %q", got)
	}
	if _, err := AptMirror(t.TempDir(), "bookworm"); !errors.Is(err, ErrNoMirror) {
		t.Errorf("no sources: %v", err)
	}
}

func TestBasesListFindRemove(t *testing.T) {
	s := openStore(t, t.TempDir())
	var ids []string
	for _, body := range []string{"one", "two"} {
		b, err := s.TarBase(context.Background(), writeArchive(t, t.TempDir(), makeTar(t, file("f", 0o644, body))), ImportOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, b.Digest)
	}
	list, err := s.Bases()
	if err != nil || len(list) != 2 {
		t.Fatalf("Bases = %+v, %v", list, err)
	}
	b, err := s.FindBase(ids[0][len("sha256:") : len("sha256:")+8])
	if err != nil || b.ID != ids[0] || b.Kind != "tar" {
		t.Fatalf("FindBase = %+v, %v", b, err)
	}
	if _, err := s.FindBase("zz"); err == nil {
		t.Error("FindBase accepted a bad id")
	}
	// A base a sandbox uses stays.
	release := UseBase(b.Dir + "/rootfs")
	if err := s.RemoveBase(b); !errors.Is(err, ErrInUse) {
		t.Fatalf("RemoveBase of a used base: %v", err)
	}
	release()
	if err := s.RemoveBase(b); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("base still there: %v", err)
	}
	if list, _ := s.Bases(); len(list) != 1 || list[0].ID != ids[1] {
		t.Errorf("after rm: %+v", list)
	}
	if tmp, _ := os.ReadDir(s.dir + "/tmp"); len(tmp) != 0 {
		t.Errorf("left in tmp: %v", tmp)
	}
}

// TestBuildDebian12 builds the curated base twice from the machine's
// mirror: the same packages give the same id.
func TestBuildDebian12(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("debootstrap needs root")
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		t.Skip("debootstrap is not installed (scripts/test-setup.sh installs it)")
	}
	if testing.Short() {
		t.Skip("builds Debian twice (about 2 minutes)")
	}
	s := openStore(t, t.TempDir())
	ctx := context.Background()
	if _, err := s.CuratedBase(Debian12); !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("before a build: %v", err)
	}
	var steps int
	a, err := s.BuildCurated(ctx, Debian12, BuildOptions{UIDShift: 1 << 20, Progress: func(string) { steps++ }})
	if err != nil {
		t.Fatal(err)
	}
	if steps < 10 {
		t.Errorf("%d progress steps", steps)
	}
	b, err := s.BuildCurated(ctx, Debian12, BuildOptions{UIDShift: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest != b.Digest || a.Root != b.Root {
		t.Errorf("two builds, two ids: %s %s", a.Digest, b.Digest)
	}
	got, err := s.CuratedBase(Debian12)
	if err != nil || got != a {
		t.Errorf("CuratedBase = %+v, %v; want %+v", got, err, a)
	}
	version, err := os.ReadFile(a.Root + "/etc/debian_version")
	if err != nil || !strings.HasPrefix(string(version), "12.") {
		t.Errorf("debian_version %q, %v", version, err)
	}
	var fi os.FileInfo
	if fi, err = os.Stat(a.Root + "/usr/bin/dpkg"); err != nil {
		t.Fatal(err)
	}
	if uid := fileUID(fi); uid != 1<<20 {
		t.Errorf("owner of dpkg %d, want the shift", uid)
	}
	if _, err := s.BuildCurated(ctx, "debian-11", BuildOptions{}); !errors.Is(err, ErrUnknownBase) {
		t.Errorf("unknown base: %v", err)
	}
}

func fileUID(fi os.FileInfo) uint32 { return fi.Sys().(*syscall.Stat_t).Uid }

// mountsBelow lists the mount points at or below dir.
func mountsBelow(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	return out
}

// A debootstrap that fails with its target's /proc mounted leaves no
// mount and no work directory behind.
func TestBuildFailureLeavesNoMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("building needs root")
	}
	bin := t.TempDir()
	fake := "#!/bin/sh\n# debootstrap's arguments: options, suite, target, mirror\nfor a; do target=$mirror; mirror=$a; done\n" +
		"case $target in /*) ;; *) exit 2;; esac\n" +
		"mkdir -p \"$target/proc\" && mount -t proc proc \"$target/proc\" && echo 'E: mirror unreachable' && exit 1\n"
	if err := os.WriteFile(filepath.Join(bin, "debootstrap"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	dir := t.TempDir()
	s := openStore(t, dir)
	_, err := s.BuildCurated(context.Background(), Debian12, BuildOptions{Mirror: "http://127.0.0.1:9/debian"})
	if !errors.Is(err, ErrBuild) {
		t.Fatalf("build: %v", err)
	}
	if m := mountsBelow(t, dir); len(m) > 0 {
		for _, p := range m {
			syscall.Unmount(p, syscall.MNT_DETACH)
		}
		t.Fatalf("a failed build left mounts: %v", m)
	}
	if left := listDir(t, filepath.Join(dir, "tmp")); len(left) > 0 {
		t.Errorf("a failed build left %v in tmp/", left)
	}
}

// removeTree unmounts what is mounted below the tree, and removes nothing
// a bind mount shows.
func TestRemoveTreeUnmounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	dir, other := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(other, "keep"), []byte("x"), 0o644)
	for _, d := range []string{"a/proc", "a/b d/bind"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	if err := syscall.Mount("proc", filepath.Join(dir, "a/proc"), "proc", 0, ""); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount(other, filepath.Join(dir, "a/b d/bind"), "", syscall.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	if err := removeTree(dir); err != nil {
		t.Fatal(err)
	}
	if m := mountsBelow(t, dir); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the tree is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(other, "keep")); err != nil {
		t.Errorf("removing the tree removed what a bind mount in it showed: %v", err)
	}
}
