package store

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestCleanName(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		err      error
	}{
		{"a/b", "a/b", nil},
		{"./a/b/", "a/b", nil},
		{"/etc/passwd", "etc/passwd", nil},
		{"//a//b", "a/b", nil},
		{"a/../b", "b", nil},
		{"a/./b/.", "a/b", nil},
		{"./", "", nil},
		{".", "", nil},
		{"/", "", nil},
		{"a/..", "", nil},
		{"", "", errEmptyName},
		{"..", "", errNameEscapes},
		{"../escape", "", errNameEscapes},
		{"a/../../escape", "", errNameEscapes},
		{"/../etc", "", errNameEscapes},
		{"a/b/../../..", "", errNameEscapes},
		{"a\x00b", "", errNameNUL},
		{strings.Repeat("a", 4097), "", errNameTooLong},
		{"..a/b..", "..a/b..", nil},
	} {
		got, err := cleanName(tc.in)
		if got != tc.want || err != tc.err {
			t.Errorf("cleanName(%q) = %q, %v; want %q, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// hostileEnv is the scene of a hostile import: a directory holding the
// store, the archive and a directory outside that must stay untouched.
type hostileEnv struct {
	base, outside string
	s             *Store
}

func newHostileEnv(t *testing.T) *hostileEnv {
	t.Helper()
	base := t.TempDir()
	e := &hostileEnv{base: base, outside: filepath.Join(base, "outside")}
	if err := os.Mkdir(e.outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.outside, "keep"), []byte("original"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.s = openStore(t, filepath.Join(base, "store"))
	return e
}

// check asserts that nothing outside the store changed.
func (e *hostileEnv) check(t *testing.T) {
	t.Helper()
	if names := listDir(t, e.outside); fmt.Sprint(names) != "[keep]" {
		t.Errorf("outside holds %v, want [keep]", names)
	}
	if b, _ := os.ReadFile(filepath.Join(e.outside, "keep")); string(b) != "original" {
		t.Errorf("outside/keep holds %q", b)
	}
	if names := listDir(t, e.base); fmt.Sprint(names) != "[archive.bin outside store]" {
		t.Errorf("the test dir holds %v", names)
	}
	if found := findNamed(t, e.base, filepath.Join(e.base, "store", "bases"), "escape"); len(found) != 0 {
		t.Errorf("escape written at %v", found)
	}
	for _, p := range []string{"/etc/escape", "/escape", "/tmp/escape"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s exists on the host", p)
		}
	}
}

func TestTarBaseHostile(t *testing.T) {
	checkFDs(t)
	for _, tc := range []struct {
		name  string
		build func(t *testing.T, e *hostileEnv) []byte
		opt   ImportOptions
		want  error  // errors.Is target, if any
		msg   string // substring of the error
	}{
		{
			name:  "dotdot",
			build: func(t *testing.T, e *hostileEnv) []byte { return makeTar(t, file("../escape", 0o644, "x")) },
			want:  errNameEscapes,
		},
		{
			name: "nested dotdot",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return makeTar(t, dir("a/", 0o755), file("a/../../escape", 0o644, "x"))
			},
			want: errNameEscapes,
		},
		{
			name: "write through symlink to outside",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return makeTar(t, symlink("link", e.outside), file("link/escape", 0o644, "x"))
			},
			want: errSymlinkInPath,
			msg:  `entry "link/escape": path traverses a symlink`,
		},
		{
			name: "mkdir through symlink to outside",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return makeTar(t, symlink("link", e.outside), dir("link/escape/", 0o755))
			},
			want: errSymlinkInPath,
		},
		{
			name: "symlink through symlink to outside",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return makeTar(t, symlink("link", e.outside), symlink("link/escape", "/etc/passwd"))
			},
			want: errSymlinkInPath,
		},
		{
			name: "deep path through relative symlink",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return makeTar(t, dir("a/", 0o755), symlink("a/up", "../.."), file("a/up/b/escape", 0o644, "x"))
			},
			want: errSymlinkInPath,
		},
		{
			name: "symlink to dotdot",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return makeTar(t, symlink("link", ".."), file("link/escape", 0o644, "x"))
			},
			want: errSymlinkInPath,
		},
		{
			name: "hard link out of the root",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return makeTar(t, hardlink("escape", "../../etc/passwd"))
			},
			want: errNameEscapes,
			msg:  "hard link target",
		},
		{
			name: "hard link to a symlink",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return makeTar(t, symlink("s", "/etc/passwd"), hardlink("h", "s"))
			},
			want: errHardlinkTarget,
		},
		{
			name: "hard link to a host path",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return makeTar(t, hardlink("h", "/etc/passwd"))
			},
			want: errHardlinkTarget,
		},
		{
			name: "hard link through a symlink",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return makeTar(t, dir("d/", 0o755), file("d/f", 0o644, "f"), symlink("s", "d"), hardlink("h", "s/f"))
			},
			want: errHardlinkTarget,
		},
		{
			name: "hard link to a directory",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return makeTar(t, dir("d/", 0o755), hardlink("h", "d"))
			},
			want: errHardlinkTarget,
		},
		{
			name: "char device outside dev",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return makeTar(t, special(tar.TypeChar, "etc/null"))
			},
			want: errDevice,
			msg:  "device node",
		},
		{
			name: "block device",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return makeTar(t, special(tar.TypeBlock, "sda"))
			},
			want: errDevice,
		},
		{
			name: "device named like dev",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return makeTar(t, special(tar.TypeChar, "devices/null"))
			},
			want: errDevice,
		},
		{
			name: "fifo",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return makeTar(t, special(tar.TypeFifo, "run/initctl"))
			},
			want: errFifo,
		},
		{
			name: "file replaces directory",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return makeTar(t, dir("d/", 0o755), file("d/f", 0o644, "f"), file("d", 0o644, "x"))
			},
			want: errReplaceDir,
		},
		{
			name: "header size beyond MaxBytes",
			build: func(t *testing.T, e *hostileEnv) []byte {
				var buf bytes.Buffer
				tw := tar.NewWriter(&buf)
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "big", Size: 1 << 40, Mode: 0o644}); err != nil {
					t.Fatal(err)
				}
				return append(buf.Bytes(), make([]byte, 4096)...) // no data follows
			},
			opt:  ImportOptions{MaxBytes: 1 << 20},
			want: ErrLimit,
			msg:  "archive expands beyond 1048576 bytes",
		},
		{
			name: "total size beyond MaxBytes",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return makeTar(t, file("a", 0o644, strings.Repeat("a", 600)), file("b", 0o644, strings.Repeat("b", 600)))
			},
			opt:  ImportOptions{MaxBytes: 1000},
			want: ErrLimit,
		},
		{
			name: "too many entries",
			build: func(t *testing.T, e *hostileEnv) []byte {
				var ents []ent
				for i := range 10 {
					ents = append(ents, file(fmt.Sprint("f", i), 0o644, ""))
				}
				return makeTar(t, ents...)
			},
			opt:  ImportOptions{MaxEntries: 5},
			want: ErrLimit,
			msg:  "more than 5 entries",
		},
		{
			name: "deep name makes too many directories",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return makeTar(t, file("a/b/c/d/e/f/g/h", 0o644, "x"))
			},
			opt:  ImportOptions{MaxEntries: 4},
			want: ErrLimit,
			msg:  "more than 4 entries",
		},
		{
			name: "symlink targets count as bytes",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return makeTar(t, symlink("a", strings.Repeat("t", 3000)), symlink("b", strings.Repeat("t", 3000)))
			},
			opt:  ImportOptions{MaxBytes: 4000},
			want: ErrLimit,
		},
		{
			name: "truncated in file data",
			build: func(t *testing.T, e *hostileEnv) []byte {
				b := makeTar(t, file("a", 0o644, strings.Repeat("a", 5000)))
				return b[:512+2000]
			},
			msg: "truncated",
		},
		{
			name: "truncated between entries",
			build: func(t *testing.T, e *hostileEnv) []byte {
				b := makeTar(t, file("a", 0o644, "a"), file("b", 0o644, "b"))
				return b[:1024] // the first entry, whole, and nothing after
			},
			msg: "no end-of-archive marker",
		},
		{
			name: "truncated in a header",
			build: func(t *testing.T, e *hostileEnv) []byte {
				b := makeTar(t, file("a", 0o644, "a"), file("b", 0o644, "b"))
				return b[:1024+100]
			},
			msg: "truncated",
		},
		{
			name: "corrupt gzip stream",
			build: func(t *testing.T, e *hostileEnv) []byte {
				b := gzipBytes(t, sampleTar(t))
				for i := len(b) / 2; i < len(b)/2+16; i++ {
					b[i] ^= 0x55
				}
				return b
			},
			// The tar reader may see the garbage before gzip does.
		},
		{
			name: "gzip with bad checksum",
			build: func(t *testing.T, e *hostileEnv) []byte {
				b := gzipBytes(t, sampleTar(t))
				b[len(b)-6] ^= 1 // in the CRC-32 trailer
				return b
			},
			msg: "checksum",
		},
		{
			name: "gzip followed by garbage",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return append(gzipBytes(t, sampleTar(t)), "garbage!"...)
			},
			msg: "decompressing gzip",
		},
		{
			name: "corrupt xz stream",
			build: func(t *testing.T, e *hostileEnv) []byte {
				b := compressCLI(t, "xz", sampleTar(t))
				for i := len(b) / 2; i < len(b)/2+16; i++ {
					b[i] ^= 0x55
				}
				return b
			},
			// xz writes what it decoded before it checks a block, so the
			// tar reader may fail first; then xz is stopped.
		},
		{
			name: "truncated xz stream",
			build: func(t *testing.T, e *hostileEnv) []byte {
				b := compressCLI(t, "xz", sampleTar(t))
				return b[:len(b)-20]
			},
			msg: "xz failed",
		},
		{
			name: "corrupt zstd stream",
			build: func(t *testing.T, e *hostileEnv) []byte {
				b := compressCLI(t, "zstd", sampleTar(t))
				for i := len(b) / 2; i < len(b)/2+16; i++ {
					b[i] ^= 0x55
				}
				return b
			},
			msg: "zstd failed",
		},
		{
			name: "corrupt bzip2 stream",
			build: func(t *testing.T, e *hostileEnv) []byte {
				b := compressCLI(t, "bzip2", sampleTar(t))
				for i := len(b) / 2; i < len(b)/2+16; i++ {
					b[i] ^= 0x55
				}
				return b
			},
			// bzip2 checks a block's CRC only at its end, after the tar
			// reader has seen garbage.
		},
		{
			name:  "empty file",
			build: func(t *testing.T, e *hostileEnv) []byte { return nil },
			msg:   "has no entries",
		},
		{
			name:  "not a tar",
			build: func(t *testing.T, e *hostileEnv) []byte { return bytes.Repeat([]byte("not a tar archive\n"), 100) },
			msg:   "invalid tar header",
		},
		{
			name:  "zip",
			build: func(t *testing.T, e *hostileEnv) []byte { return []byte("PK\x03\x04rest of a zip file") },
			msg:   "is a zip file",
		},
		{
			name: "owner out of range",
			build: func(t *testing.T, e *hostileEnv) []byte {
				f := file("a", 0o644, "a")
				f.Hdr.Uid = 1<<32 - 1
				return makeTar(t, f)
			},
			opt:  ImportOptions{UIDShift: shift},
			want: ErrUnsafeArchive,
			msg:  "out of range",
		},
		{
			name: "owner past the sandbox's ids",
			build: func(t *testing.T, e *hostileEnv) []byte {
				f := file("a", 0o644, "a")
				f.Hdr.Uid = 65536
				return makeTar(t, f)
			},
			opt:  ImportOptions{UIDShift: shift},
			want: ErrUnsafeArchive,
			msg:  "outside the 65536 ids a sandbox maps",
		},
		{
			name: "group far past the sandbox's ids",
			build: func(t *testing.T, e *hostileEnv) []byte {
				f := dir("d/", 0o755)
				f.Hdr.Gid = 1 << 31
				return makeTar(t, f)
			},
			opt:  ImportOptions{UIDShift: shift},
			want: ErrUnsafeArchive,
			msg:  "outside the 65536 ids a sandbox maps",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if (strings.HasPrefix(tc.name, "owner") || strings.HasPrefix(tc.name, "group")) && !isRoot() {
				t.Skip("owners are only set as root")
			}
			e := newHostileEnv(t)
			path := writeArchive(t, e.base, tc.build(t, e))
			_, err := e.s.TarBase(context.Background(), path, tc.opt)
			if err == nil {
				t.Fatal("import succeeded")
			}
			t.Logf("error: %v", err)
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("error %v is not %v", err, tc.want)
			}
			// The archive's path holds the test's name: leave it out.
			if tc.msg != "" && !strings.Contains(strings.ReplaceAll(err.Error(), path, "ARCHIVE"), tc.msg) {
				t.Errorf("error %q does not say %q", err, tc.msg)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the archive", err)
			}
			if errors.Is(err, ErrUnsafeArchive) || errors.Is(err, ErrLimit) {
				if _, ok := errors.AsType[*EntryError](err); !ok {
					t.Errorf("error %v is not an *EntryError", err)
				}
			}
			assertStoreEmpty(t, e.s)
			e.check(t)
		})
	}
}

// TestTarBaseHostileAccepted covers archives that look hostile but are
// extracted, safely, as tar would.
func TestTarBaseHostileAccepted(t *testing.T) {
	checkFDs(t)
	for _, tc := range []struct {
		name  string
		build func(t *testing.T, e *hostileEnv) []byte
		check func(t *testing.T, e *hostileEnv, root string)
	}{
		{
			name: "absolute name lands inside",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return makeTar(t, file("/etc/escape", 0o644, "inside"), file("/escape", 0o644, "inside"))
			},
			check: func(t *testing.T, e *hostileEnv, root string) {
				for _, p := range []string{"etc/escape", "escape"} {
					if b, err := os.ReadFile(filepath.Join(root, p)); err != nil || string(b) != "inside" {
						t.Errorf("%s: %q, %v", p, b, err)
					}
				}
			},
		},
		{
			name: "file replaces symlink to outside",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return makeTar(t, symlink("keep", filepath.Join(e.outside, "keep")), file("keep", 0o644, "mine"))
			},
			check: func(t *testing.T, e *hostileEnv, root string) {
				fi, err := os.Lstat(filepath.Join(root, "keep"))
				if err != nil || !fi.Mode().IsRegular() {
					t.Errorf("keep is %v, %v; want a regular file", fi, err)
				}
			},
		},
		{
			name: "dir replaces symlink to outside",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return makeTar(t, symlink("d", e.outside), dir("d/", 0o755), file("d/escape", 0o644, "x"))
			},
			check: func(t *testing.T, e *hostileEnv, root string) {
				fi, err := os.Lstat(filepath.Join(root, "d"))
				if err != nil || !fi.IsDir() {
					t.Errorf("d is %v, %v; want a directory", fi, err)
				}
			},
		},
		{
			name: "symlink replaces symlink",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return makeTar(t, symlink("l", e.outside), symlink("l", "/etc/passwd"))
			},
			check: func(t *testing.T, e *hostileEnv, root string) {
				if got, _ := os.Readlink(filepath.Join(root, "l")); got != "/etc/passwd" {
					t.Errorf("l links to %q", got)
				}
			},
		},
		{
			name: "hard link replaced by a file",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return makeTar(t, file("f", 0o644, "f"), hardlink("h", "f"), file("h", 0o644, "h"))
			},
			check: func(t *testing.T, e *hostileEnv, root string) {
				if b, _ := os.ReadFile(filepath.Join(root, "f")); string(b) != "f" {
					t.Errorf("f holds %q: writing h went through the old link", b)
				}
			},
		},
		{
			name: "devices under dev are skipped",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return makeTar(t, special(tar.TypeChar, "dev/null"), special(tar.TypeBlock, "./dev/sda"), special(tar.TypeFifo, "/dev/fifo"), file("ok", 0o644, ""))
			},
			check: func(t *testing.T, e *hostileEnv, root string) {
				if names := listDir(t, filepath.Join(root, "dev")); len(names) != 0 {
					t.Errorf("dev holds %v", names)
				}
			},
		},
		{
			name: "dotdot that stays inside",
			build: func(t *testing.T, e *hostileEnv) []byte {
				return makeTar(t, file("a/../b", 0o644, "b"))
			},
			check: func(t *testing.T, e *hostileEnv, root string) {
				if b, _ := os.ReadFile(filepath.Join(root, "b")); string(b) != "b" {
					t.Errorf("b holds %q", b)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newHostileEnv(t)
			path := writeArchive(t, e.base, tc.build(t, e))
			b, err := e.s.TarBase(context.Background(), path, ImportOptions{})
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, e, b.Root)
			e.check(t)
		})
	}
}

func TestDecompressorFailure(t *testing.T) {
	checkFDs(t)
	inner := sampleTar(t)
	t.Run("killed after a complete stream", func(t *testing.T) {
		// A fake xz writes a whole, valid tar stream and is then killed:
		// the import must fail all the same.
		bin := t.TempDir()
		innerPath := filepath.Join(bin, "inner.tar")
		if err := os.WriteFile(innerPath, inner, 0o644); err != nil {
			t.Fatal(err)
		}
		script := "#!/bin/sh\ncat '" + innerPath + "'\nkill -9 $$\n"
		if err := os.WriteFile(filepath.Join(bin, "xz"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
		e := newHostileEnv(t)
		path := writeArchive(t, e.base, []byte("\xfd7zXZ\x00 not really xz"))
		_, err := e.s.TarBase(context.Background(), path, ImportOptions{})
		if err == nil || !strings.Contains(err.Error(), "xz failed") || !strings.Contains(err.Error(), "killed") {
			t.Errorf("got %v, want an error saying xz was killed", err)
		}
		assertStoreEmpty(t, e.s)
	})
	t.Run("exits 1 after a complete stream", func(t *testing.T) {
		bin := t.TempDir()
		innerPath := filepath.Join(bin, "inner.tar")
		if err := os.WriteFile(innerPath, inner, 0o644); err != nil {
			t.Fatal(err)
		}
		script := "#!/bin/sh\ncat '" + innerPath + "'\necho 'zstd: bad things' >&2\nexit 1\n"
		if err := os.WriteFile(filepath.Join(bin, "zstd"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
		e := newHostileEnv(t)
		path := writeArchive(t, e.base, []byte("\x28\xb5\x2f\xfd not really zstd"))
		_, err := e.s.TarBase(context.Background(), path, ImportOptions{})
		if err == nil || !strings.Contains(err.Error(), "zstd failed: exit status 1: zstd: bad things") {
			t.Errorf("got %v, want an error with zstd's exit status and message", err)
		}
		assertStoreEmpty(t, e.s)
	})
	for _, tc := range []struct{ tool, pkg, magic string }{
		{"xz", "xz-utils", "\xfd7zXZ\x00"},
		{"zstd", "zstd", "\x28\xb5\x2f\xfd"},
	} {
		t.Run(tc.tool+" missing", func(t *testing.T) {
			t.Setenv("PATH", t.TempDir())
			e := newHostileEnv(t)
			path := writeArchive(t, e.base, []byte(tc.magic+"rest"))
			_, err := e.s.TarBase(context.Background(), path, ImportOptions{})
			if !errors.Is(err, ErrNoDecompressor) || !strings.Contains(err.Error(), "install the "+tc.pkg+" package") {
				t.Errorf("got %v, want ErrNoDecompressor naming %s", err, tc.pkg)
			}
			assertStoreEmpty(t, e.s)
		})
	}
}

// fuzzLimits keep each fuzz input quick.
func fuzzLimits() limits {
	return limits{maxBytes: 1 << 20, maxEntries: 64, chown: isRoot(), shift: shift}
}

func FuzzExtract(f *testing.F) {
	f.Add(makeTar(f, dir("./", 0o755), dir("a/", 0o555), file("a/f", 0o4755, "data"), symlink("a/l", "/etc/passwd"), hardlink("a/h", "a/f")))
	f.Add(gzipBytes(f, makeTar(f, file("f", 0o644, "gz"))))
	f.Add(makeTar(f, file("../sentinel/escape", 0o644, "x")))
	f.Add(makeTar(f, symlink("l", "../sentinel"), file("l/escape", 0o644, "x")))
	f.Add(makeTar(f, symlink("l", ".."), dir("l/sentinel/x/", 0o755)))
	f.Add(makeTar(f, file("f", 0o644, "f"), hardlink("h", "../sentinel/f")))
	f.Add(makeTar(f, special(tar.TypeChar, "dev/null"), special(tar.TypeFifo, "fifo")))
	f.Add(makeTar(f, dir("d/", 0o755), file("d", 0o644, "x")))
	f.Add(makeTar(f, file("/abs", 0o644, "abs"), file("a/../b", 0o644, "b")))
	// Extract on tmpfs when there is one: file systems mounted with
	// online discard make every removal slow.
	scratch := f.TempDir()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "pinfold-fuzz-"); err == nil {
			scratch = d
			f.Cleanup(func() { removeTree(d) })
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir, err := os.MkdirTemp(scratch, "")
		if err != nil {
			t.Fatal(err)
		}
		defer os.Remove(dir)
		root, sentinel := filepath.Join(dir, "root"), filepath.Join(dir, "sentinel")
		for _, d := range []string{root, sentinel} {
			if err := os.Mkdir(d, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		br := bufio.NewReader(bytes.NewReader(data))
		_, _ = extractArchive(context.Background(), "fuzz", br, root, fuzzLimits(), false)
		if names := listDir(t, sentinel); len(names) != 0 {
			t.Fatalf("sentinel holds %v", names)
		}
		if names := listDir(t, dir); fmt.Sprint(names) != "[root sentinel]" {
			t.Fatalf("extraction dir holds %v", names)
		}
		for _, d := range []string{root, sentinel} {
			if err := removeTree(d); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestTarBaseSparse: a sparse file stays sparse (a small archive cannot
// fill the disk with zeros) and reads back as it was.
func TestTarBaseSparse(t *testing.T) {
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("needs GNU tar to write a sparse archive")
	}
	src := t.TempDir()
	f, err := os.Create(filepath.Join(src, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("head"), 0)
	f.WriteAt([]byte("middle"), 1<<30)
	f.Truncate(2 << 30) // ends in a hole
	f.Close()
	archive := filepath.Join(t.TempDir(), "sparse.tar")
	if out, err := exec.Command("tar", "--sparse", "-C", src, "-cf", archive, "sparse").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, out)
	}
	if fi, _ := os.Stat(archive); fi.Size() > 64<<10 {
		t.Fatalf("the archive is %d bytes: not sparse", fi.Size())
	}
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.TarBase(context.Background(), archive, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	path := filepath.Join(b.Root, "sparse")
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != 2<<30 || st.Blocks*512 > 1<<20 {
		t.Fatalf("size %d, %d bytes on disk: want 2 GiB in under 1 MiB", st.Size, st.Blocks*512)
	}
	g, _ := os.Open(path)
	defer g.Close()
	for off, want := range map[int64]string{0: "head", 1 << 30: "middle", 4096: "\x00\x00\x00\x00", 2<<30 - 4: "\x00\x00\x00\x00"} {
		got := make([]byte, len(want))
		if _, err := g.ReadAt(got, off); err != nil || string(got) != want {
			t.Errorf("at %d: %q %v, want %q", off, got, err, want)
		}
	}
}
