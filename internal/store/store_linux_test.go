package store

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const shift = 100000

var (
	longDir  = "long/" + strings.Repeat("d", 120)
	longFile = longDir + "/" + strings.Repeat("f", 200)
	gnuFile  = "gnu/" + strings.Repeat("g", 150)
)

// sampleTar is a small root filesystem with every kind of entry a real one
// has.
func sampleTar(t testing.TB) []byte {
	t.Helper()
	owned := func(e ent, uid, gid int) ent { e.Hdr.Uid, e.Hdr.Gid = uid, gid; return e }
	longHdr := file(longFile, 0o644, "long\n")
	longHdr.Hdr.Format = tar.FormatPAX
	gnuHdr := file(gnuFile, 0o644, "gnu\n")
	gnuHdr.Hdr.Format = tar.FormatGNU
	root := dir("./", 0o750)
	root.Hdr.ModTime = testTime.Add(-time.Hour)
	return makeTar(t,
		root,
		dir("etc/", 0o755),
		file("etc/hostname", 0o644, "sandbox\n"),
		symlink("etc/localtime", "/usr/share/zoneinfo/UTC"),
		// usr/ is not listed: it is made for its child.
		dir("usr/bin/", 0o755),
		owned(file("usr/bin/tool", 0o755, "#!/bin/sh\necho tool\n"), 1000, 1001),
		file("usr/bin/su", 0o4755, "setuid\n"),
		file("usr/bin/wall", 0o2755, "setgid\n"),
		owned(symlink("usr/bin/sh", "tool"), 1000, 1001),
		hardlink("usr/bin/tool2", "usr/bin/tool"),
		// A read-only directory listed before its children.
		dir("ro/", 0o555),
		file("ro/child", 0o444, "child\n"),
		dir("ro/sub/", 0o500),
		file("ro/sub/f", 0o600, "f\n"),
		dir("tmp/", 0o1777),
		dir("dev/", 0o755),
		special(tar.TypeChar, "dev/null"),
		special(tar.TypeFifo, "dev/initctl"),
		longHdr,
		gnuHdr,
		// A later entry replaces an earlier file, as tar does.
		file("etc/hostname", 0o600, "replaced\n"),
		file("/abs/file", 0o644, "abs\n"),
	)
}

func checkSampleTree(t *testing.T, root string) {
	t.Helper()
	readFile := func(rel, want string) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Error(err)
			return
		}
		if string(b) != want {
			t.Errorf("%s holds %q, want %q", rel, b, want)
		}
	}
	lstat := func(rel string) *syscall.Stat_t {
		t.Helper()
		fi, err := os.Lstat(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t)
	}
	mode := func(rel string, want uint32) {
		t.Helper()
		if got := lstat(rel).Mode & 0o7777; got != want {
			t.Errorf("%s has mode %#o, want %#o", rel, got, want)
		}
	}
	link := func(rel, want string) {
		t.Helper()
		got, err := os.Readlink(filepath.Join(root, rel))
		if err != nil || got != want {
			t.Errorf("%s links to %q (%v), want %q", rel, got, err, want)
		}
	}
	owner := func(rel string, uid, gid uint32) {
		t.Helper()
		if !isRoot() {
			return
		}
		st := lstat(rel)
		if st.Uid != uid || st.Gid != gid {
			t.Errorf("%s is owned by %d:%d, want %d:%d", rel, st.Uid, st.Gid, uid, gid)
		}
	}
	mtime := func(rel string, want time.Time) {
		t.Helper()
		st := lstat(rel)
		if got := time.Unix(st.Mtim.Sec, st.Mtim.Nsec); !got.Equal(want) {
			t.Errorf("%s has mtime %v, want %v", rel, got, want)
		}
	}

	readFile("etc/hostname", "replaced\n")
	mode("etc/hostname", 0o600)
	readFile("usr/bin/tool", "#!/bin/sh\necho tool\n")
	mode("usr/bin/tool", 0o755)
	mode("usr/bin/su", 0o755)   // setuid dropped
	mode("usr/bin/wall", 0o755) // setgid dropped
	mode("usr", 0o755)          // made for its child
	link("etc/localtime", "/usr/share/zoneinfo/UTC")
	link("usr/bin/sh", "tool")
	if a, b := lstat("usr/bin/tool"), lstat("usr/bin/tool2"); a.Ino != b.Ino {
		t.Errorf("usr/bin/tool2 is not a hard link of usr/bin/tool")
	}
	readFile("ro/child", "child\n")
	readFile("ro/sub/f", "f\n")
	mode("ro", 0o555)
	mode("ro/sub", 0o500)
	mode("tmp", 0o1777)
	mode(".", 0o750)
	readFile(longFile, "long\n")
	readFile(gnuFile, "gnu\n")
	readFile("abs/file", "abs\n")
	for _, rel := range []string{"dev/null", "dev/initctl"} {
		if _, err := os.Lstat(filepath.Join(root, rel)); !os.IsNotExist(err) {
			t.Errorf("%s exists (%v); device nodes and fifos under dev/ are skipped", rel, err)
		}
	}
	mtime("usr/bin/tool", testTime)
	mtime("etc/localtime", testTime)
	mtime("etc", testTime)
	mtime("ro", testTime)
	mtime(".", testTime.Add(-time.Hour))
	owner(".", shift, shift)
	owner("etc/hostname", shift, shift)
	owner("usr", shift, shift)
	owner("usr/bin/tool", shift+1000, shift+1001)
	owner("usr/bin/sh", shift+1000, shift+1001)
}

func TestTarBaseRoundTrip(t *testing.T) {
	checkFDs(t)
	plain := sampleTar(t)
	for _, tc := range []struct {
		name     string
		compress func(testing.TB, []byte) []byte
	}{
		{"tar", func(_ testing.TB, b []byte) []byte { return b }},
		{"gzip", gzipBytes},
		{"bzip2", func(t testing.TB, b []byte) []byte { return compressCLI(t, "bzip2", b) }},
		{"xz", func(t testing.TB, b []byte) []byte { return compressCLI(t, "xz", b) }},
		{"zstd", func(t testing.TB, b []byte) []byte { return compressCLI(t, "zstd", b) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := tc.compress(t, plain)
			tmp := t.TempDir()
			path := writeArchive(t, tmp, data)
			s := openStore(t, filepath.Join(tmp, "store"))
			ctx := context.Background()

			var lastDone, lastTotal int64
			b, err := s.TarBase(ctx, path, ImportOptions{UIDShift: shift, Progress: func(done, total int64) {
				lastDone, lastTotal = done, total
			}})
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(data)
			if want := "sha256:" + hex.EncodeToString(sum[:]); b.Digest != want {
				t.Errorf("digest %s, want %s", b.Digest, want)
			}
			if want := filepath.Join(s.Dir(), "bases", "tar", hex.EncodeToString(sum[:]), "rootfs"); b.Root != want {
				t.Errorf("root %s, want %s", b.Root, want)
			}
			if lastDone != int64(len(data)) || lastTotal != int64(len(data)) {
				t.Errorf("last progress %d/%d, want %d/%d", lastDone, lastTotal, len(data), len(data))
			}
			checkSampleTree(t, b.Root)
			checkManifest(t, filepath.Dir(b.Root), b.Digest, path, int64(len(data)))
			if names := listDir(t, filepath.Join(s.Dir(), "tmp")); len(names) != 0 {
				t.Errorf("tmp holds %v after an import", names)
			}

			// Again: the index answers without reading the archive.
			b2, err := s.TarBase(ctx, path, ImportOptions{UIDShift: shift})
			if err != nil {
				t.Fatal(err)
			}
			if b2 != b {
				t.Errorf("second lookup gave %+v, want %+v", b2, b)
			}
			if n := s.imports.Load(); n != 1 {
				t.Errorf("%d imports after a second lookup, want 1", n)
			}

			// A new mtime misses the index: the file is hashed again, and
			// its content finds the same base.
			later := time.Now().Add(time.Minute)
			if err := os.Chtimes(path, later, later); err != nil {
				t.Fatal(err)
			}
			b3, err := s.TarBase(ctx, path, ImportOptions{UIDShift: shift})
			if err != nil {
				t.Fatal(err)
			}
			if b3 != b {
				t.Errorf("after touch got %+v, want %+v", b3, b)
			}
			if n := s.imports.Load(); n != 2 {
				t.Errorf("%d imports after the file's mtime changed, want 2", n)
			}
			if names := listDir(t, filepath.Join(s.Dir(), "bases", "tar")); len(names) != 1 {
				t.Errorf("bases/tar holds %v, want one base", names)
			}
			if names := listDir(t, filepath.Join(s.Dir(), "tmp")); len(names) != 0 {
				t.Errorf("tmp holds %v after a repeated import", names)
			}
		})
	}
}

func checkManifest(t *testing.T, dir, digest, source string, size int64) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Digest   string  `json:"digest"`
		Source   string  `json:"source"`
		Size     int64   `json:"size"`
		Entries  int     `json:"entries"`
		Created  string  `json:"created"`
		Format   int     `json:"format"`
		UIDShift *uint32 `json:"uid_shift"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Digest != digest || m.Source != source || m.Size != size || m.Format != 1 || m.Entries < 20 {
		t.Errorf("manifest %+v, want digest %s, source %s, size %d, format 1, 20+ entries", m, digest, source, size)
	}
	if _, err := time.Parse(time.RFC3339, m.Created); err != nil {
		t.Errorf("manifest created %q: %v", m.Created, err)
	}
	if isRoot() && (m.UIDShift == nil || *m.UIDShift != shift) {
		t.Errorf("manifest uid_shift %v, want %d", m.UIDShift, shift)
	}
}

func TestTarBaseIndex(t *testing.T) {
	tmp := t.TempDir()
	path := writeArchive(t, tmp, makeTar(t, file("a", 0o644, "a\n")))
	s := openStore(t, filepath.Join(tmp, "store"))
	ctx := context.Background()
	b, err := s.TarBase(ctx, path, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("relative path", func(t *testing.T) {
		t.Chdir(tmp)
		b2, err := s.TarBase(ctx, "archive.bin", ImportOptions{})
		if err != nil || b2 != b {
			t.Errorf("got %+v, %v; want %+v", b2, err, b)
		}
		if n := s.imports.Load(); n != 1 {
			t.Errorf("%d imports, want 1", n)
		}
	})

	t.Run("other uid shift misses", func(t *testing.T) {
		if !isRoot() {
			t.Skip("owners are only set as root")
		}
		before := s.imports.Load()
		_, err := s.TarBase(ctx, path, ImportOptions{UIDShift: 200000})
		if err == nil || !strings.Contains(err.Error(), "owners") {
			t.Errorf("got %v, want an error about the base's owners", err)
		}
		if s.imports.Load() != before+1 {
			t.Errorf("a different uid shift did not miss the index")
		}
		assertNoWork(t, s)
	})

	t.Run("removed base is imported again", func(t *testing.T) {
		if err := removeTree(filepath.Dir(b.Root)); err != nil {
			t.Fatal(err)
		}
		before := s.imports.Load()
		b2, err := s.TarBase(ctx, path, ImportOptions{})
		if err != nil || b2 != b {
			t.Fatalf("got %+v, %v; want %+v", b2, err, b)
		}
		if s.imports.Load() != before+1 {
			t.Errorf("a missing base did not cause an import")
		}
	})

	t.Run("garbage index entry misses", func(t *testing.T) {
		for _, name := range listDir(t, filepath.Join(s.Dir(), "index", "tar")) {
			if err := os.WriteFile(filepath.Join(s.Dir(), "index", "tar", name), []byte("sha256:../../../etc\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		before := s.imports.Load()
		b2, err := s.TarBase(ctx, path, ImportOptions{})
		if err != nil || b2 != b {
			t.Fatalf("got %+v, %v; want %+v", b2, err, b)
		}
		if s.imports.Load() != before+1 {
			t.Errorf("a broken index entry did not cause an import")
		}
	})

	t.Run("changed content", func(t *testing.T) {
		path := writeArchive(t, t.TempDir(), makeTar(t, file("a", 0o644, "a\n")))
		b1, err := s.TarBase(ctx, path, ImportOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, makeTar(t, file("b", 0o644, "b\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		b2, err := s.TarBase(ctx, path, ImportOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if b1.Digest == b2.Digest {
			t.Errorf("new content kept digest %s", b1.Digest)
		}
		if _, err := os.Stat(filepath.Join(b2.Root, "b")); err != nil {
			t.Error(err)
		}
	})
}

func assertNoWork(t testing.TB, s *Store) {
	t.Helper()
	if names := listDir(t, filepath.Join(s.Dir(), "tmp")); len(names) != 0 {
		t.Errorf("tmp holds %v", names)
	}
}

func TestTarBaseConcurrent(t *testing.T) {
	var ents []ent
	for i := range 300 {
		ents = append(ents, file(fmt.Sprintf("d%d/f%d", i%7, i), 0o644, strings.Repeat("x", i*37)))
	}
	tmp := t.TempDir()
	path := writeArchive(t, tmp, gzipBytes(t, makeTar(t, ents...)))
	dir := filepath.Join(tmp, "store")
	for round := range 3 {
		if round > 0 {
			// Start over, so that each round imports.
			if err := removeTree(dir); err != nil {
				t.Fatal(err)
			}
		}
		const n = 4
		var wg sync.WaitGroup
		bases := make([]Base, n)
		errs := make([]error, n)
		start := make(chan struct{})
		for i := range n {
			// Separate Store values, as separate processes would have.
			s := openStore(t, dir)
			wg.Go(func() {
				<-start
				bases[i], errs[i] = s.TarBase(context.Background(), path, ImportOptions{UIDShift: shift})
			})
		}
		close(start)
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("import %d: %v", i, errs[i])
			}
			if bases[i] != bases[0] {
				t.Errorf("import %d got %+v, import 0 %+v", i, bases[i], bases[0])
			}
		}
		if names := listDir(t, filepath.Join(dir, "bases", "tar")); len(names) != 1 {
			t.Errorf("bases/tar holds %v, want one base", names)
		}
		if names := listDir(t, filepath.Join(dir, "tmp")); len(names) != 0 {
			t.Errorf("tmp holds %v", names)
		}
		if _, err := os.Stat(filepath.Join(bases[0].Root, "d5", "f299")); err != nil {
			t.Error(err)
		}
	}
}

func TestTarBaseCancel(t *testing.T) {
	tmp := t.TempDir()
	path := writeArchive(t, tmp, makeTar(t, file("a", 0o644, "a")))
	s := openStore(t, filepath.Join(tmp, "store"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.TarBase(ctx, path, ImportOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
	assertStoreEmpty(t, s)
}

func TestCleanTmp(t *testing.T) {
	s := openStore(t, t.TempDir())
	tmp := filepath.Join(s.Dir(), "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	self, err := procStart(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	deadPid := cmd.Process.Pid
	if _, err := os.Stat("/proc/" + strconv.Itoa(deadPid)); err == nil {
		t.Skipf("pid %d was reused at once", deadPid)
	}

	mk := func(name string) string {
		p := filepath.Join(tmp, name)
		if err := os.MkdirAll(filepath.Join(p, "rootfs", "ro"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "rootfs", "ro", "f"), nil, 0o400); err != nil {
			t.Fatal(err)
		}
		// A read-only directory, as an interrupted import may leave.
		if err := os.Chmod(filepath.Join(p, "rootfs", "ro"), 0o500); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dead := mk(fmt.Sprintf("%d-%d-0123abcd", deadPid, self))
	reused := mk(fmt.Sprintf("%d-%d-4567abcd", os.Getpid(), self+1)) // our pid, another start time
	live := mk(fmt.Sprintf("%d-%d-89abcdef", os.Getpid(), self))
	other := mk("not-ours")
	if err := os.WriteFile(filepath.Join(tmp, fmt.Sprintf("%d-%d-feed", deadPid, self)), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	removed, err := s.CleanTmp()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{dead, filepath.Join(tmp, fmt.Sprintf("%d-%d-feed", deadPid, self)), reused}
	slices.Sort(removed)
	slices.Sort(want)
	if !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	for _, p := range want {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s still exists (%v)", p, err)
		}
	}
	for _, p := range []string{live, other} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
}

func TestProcStart(t *testing.T) {
	a, err := procStart(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	b, err := procStart(os.Getpid())
	if err != nil || a != b || a == 0 {
		t.Errorf("start times %d, %d (%v)", a, b, err)
	}
	if _, err := procStart(1 << 30); !os.IsNotExist(err) {
		t.Errorf("start of a missing process: %v", err)
	}
}

func TestParseWorkName(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pid   int
		start uint64
		ok    bool
	}{
		{"123-456-abcdef", 123, 456, true},
		{"123-456-ABCDEF", 0, 0, false},
		{"123-456", 0, 0, false},
		{"-456-ab", 0, 0, false},
		{"0-456-ab", 0, 0, false},
		{"a-456-ab", 0, 0, false},
		{"123-x-ab", 0, 0, false},
		{"123-456-", 0, 0, false},
	} {
		pid, start, ok := parseWorkName(tc.name)
		if pid != tc.pid || start != tc.start || ok != tc.ok {
			t.Errorf("parseWorkName(%q) = %d, %d, %v; want %d, %d, %v", tc.name, pid, start, ok, tc.pid, tc.start, tc.ok)
		}
	}
}

func TestOpen(t *testing.T) {
	t.Run("creates with 0700", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "a", "store")
		s := openStore(t, dir)
		if s.Dir() != dir {
			t.Errorf("Dir() = %s, want %s", s.Dir(), dir)
		}
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o700 {
			t.Errorf("store mode %v, want 0700", fi.Mode().Perm())
		}
	})
	t.Run("refuses a group-writable dir", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o770); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "others may write") {
			t.Errorf("got %v, want a refusal", err)
		}
	})
	t.Run("refuses another user's dir", func(t *testing.T) {
		if !isRoot() {
			t.Skip("needs root to chown")
		}
		dir := t.TempDir()
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
			t.Errorf("got %v, want a refusal", err)
		}
	})
	t.Run("refuses a file", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "f")
		os.WriteFile(p, nil, 0o600)
		if _, err := Open(p); err == nil {
			t.Error("opened a file as a store")
		}
	})
}

func TestDefaultDir(t *testing.T) {
	t.Setenv("PINFOLD_STORE", "/some/store")
	if d, err := DefaultDir(); err != nil || d != "/some/store" {
		t.Errorf("with PINFOLD_STORE: %q, %v", d, err)
	}
	t.Setenv("PINFOLD_STORE", "")
	t.Setenv("XDG_DATA_HOME", "/xdg")
	t.Setenv("HOME", "/home/u")
	want := "/xdg/pinfold"
	if isRoot() {
		want = "/var/lib/pinfold"
	}
	if d, err := DefaultDir(); err != nil || d != want {
		t.Errorf("DefaultDir() = %q, %v; want %q", d, err, want)
	}
}

// TestUnprivileged runs an import as uid 65534 in a child process: no
// owners are set, read-only directories in the archive block nothing, and
// the base can be removed again.
func TestUnprivileged(t *testing.T) {
	if dir := os.Getenv("PINFOLD_STORE_TEST_CHILD"); dir != "" {
		unprivilegedChild(t, dir)
		return
	}
	if !isRoot() {
		t.Skip("switching to uid 65534 needs root")
	}
	dir, err := os.MkdirTemp("", "pinfold-unprivileged-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeTree(dir) })
	writeArchive(t, dir, sampleTar(t))
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	child := filepath.Join(dir, "store.test")
	if err := os.WriteFile(child, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, "archive.bin")} {
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(child, "-test.run=^TestUnprivileged$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "PINFOLD_STORE_TEST_CHILD="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestUnprivileged") {
		t.Fatalf("the child did not run the test:\n%s", out)
	}
}

func unprivilegedChild(t *testing.T, top string) {
	if isRoot() {
		t.Fatal("the child runs as root")
	}
	s := openStore(t, filepath.Join(top, "store"))
	path := filepath.Join(top, "archive.bin")
	b, err := s.TarBase(context.Background(), path, ImportOptions{UIDShift: shift})
	if err != nil {
		t.Fatal(err)
	}
	checkSampleTree(t, b.Root)
	fi, err := os.Lstat(filepath.Join(b.Root, "usr", "bin", "tool"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != uint32(os.Geteuid()) {
		t.Errorf("usr/bin/tool belongs to uid %d, not to the importing user", st.Uid)
	}
	if _, err := s.TarBase(context.Background(), path, ImportOptions{}); err != nil {
		t.Errorf("a different UIDShift matters only to root: %v", err)
	}
	if n := s.imports.Load(); n != 1 {
		t.Errorf("%d imports, want 1", n)
	}

	// A refused archive leaves nothing, also as a user.
	bad := filepath.Join(top, "bad.tar")
	if err := os.WriteFile(bad, makeTar(t, dir("ro/", 0o500), file("ro/f", 0o400, "f"), symlink("l", "/"), file("l/escape", 0o644, "x")), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TarBase(context.Background(), bad, ImportOptions{}); !errors.Is(err, ErrUnsafeArchive) {
		t.Errorf("got %v, want ErrUnsafeArchive", err)
	}
	assertNoWork(t, s)

	// Bases hold read-only directories; removing one must still work.
	if err := removeTree(filepath.Dir(b.Root)); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkTarBaseCached measures the hot path: a base looked up again.
func BenchmarkTarBaseCached(b *testing.B) {
	tmp := b.TempDir()
	path := writeArchive(b, tmp, makeTar(b, file("a", 0o644, "a")))
	s := openStore(b, filepath.Join(tmp, "store"))
	ctx := context.Background()
	if _, err := s.TarBase(ctx, path, ImportOptions{}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.TarBase(ctx, path, ImportOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	if n := s.imports.Load(); n != 1 {
		b.Fatalf("%d imports", n)
	}
}
