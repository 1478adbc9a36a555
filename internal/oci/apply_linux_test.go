package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
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
		{"a/../b", "b", nil},
		{"./", "", nil},
		{"", "", errEmptyName},
		{"../escape", "", errNameEscapes},
		{"a/../../escape", "", errNameEscapes},
		{"a\x00b", "", errNameNUL},
		{strings.Repeat("a", 4097), "", errNameTooLong},
	} {
		got, err := cleanName(tc.in)
		if got != tc.want || err != tc.err {
			t.Errorf("cleanName(%q) = %q, %v; want %q, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// scene is a directory holding the image, the root and, beside the root,
// a directory outside that hostile layers aim at.
type scene struct {
	base, root, outside string
}

func newScene(t *testing.T) *scene {
	t.Helper()
	base := t.TempDir()
	s := &scene{base: base, root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{s.root, s.outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(s.outside, "victim"), []byte("keep me\n"))
	return s
}

// apply writes an image of layers (plain tars) and applies it to the root.
func (s *scene) apply(t *testing.T, opt ApplyOptions, tars ...[]byte) (ApplyStats, error) {
	t.Helper()
	var layers []layer
	for i, b := range tars {
		if i%2 == 0 {
			layers = append(layers, plainLayer(b))
		} else {
			layers = append(layers, gzipLayer(t, b))
		}
	}
	img, err := Open(context.Background(), oneImage(t, layers...), "")
	if err != nil {
		t.Fatal(err)
	}
	return Apply(context.Background(), img, s.root, opt)
}

// checkOutside checks that nothing outside the root changed.
func (s *scene) checkOutside(t *testing.T) {
	t.Helper()
	ents, err := os.ReadDir(s.outside)
	if err != nil {
		t.Fatalf("outside: %v", err)
	}
	if len(ents) != 1 || ents[0].Name() != "victim" {
		t.Errorf("outside holds %v", ents)
	}
	if b, err := os.ReadFile(filepath.Join(s.outside, "victim")); err != nil || string(b) != "keep me\n" {
		t.Errorf("outside/victim = %q, %v", b, err)
	}
	for _, p := range []string{"x", "pwned"} {
		if _, err := os.Lstat(filepath.Join(s.base, p)); err == nil {
			t.Errorf("%s was made beside the root", p)
		}
	}
}

func TestHostileLayers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layers func(t *testing.T, s *scene) [][]byte
	}{
		{"dotdot", func(t *testing.T, s *scene) [][]byte {
			return [][]byte{makeTar(t, file("../x", 0o644, "x"))}
		}},
		{"dotdot deep", func(t *testing.T, s *scene) [][]byte {
			return [][]byte{makeTar(t, dir("a/", 0o755), file("a/../../x", 0o644, "x"))}
		}},
		{"absolute symlink then a file through it", func(t *testing.T, s *scene) [][]byte {
			return [][]byte{makeTar(t, symlink("evil", s.outside), file("evil/pwned", 0o644, "pwned"))}
		}},
		{"absolute symlink, file through it in the next layer", func(t *testing.T, s *scene) [][]byte {
			return [][]byte{makeTar(t, symlink("evil", s.outside)), makeTar(t, file("evil/pwned", 0o644, "pwned"))}
		}},
		{"relative symlink out", func(t *testing.T, s *scene) [][]byte {
			return [][]byte{makeTar(t, symlink("up", "../outside"), file("up/pwned", 0o644, "pwned"))}
		}},
		{"symlink to a directory inside", func(t *testing.T, s *scene) [][]byte {
			// Refused too: nothing is created through a symlink.
			return [][]byte{makeTar(t, dir("d/", 0o755), symlink("s", "d"), file("s/pwned", 0o644, "pwned"))}
		}},
		{"directory over a symlink does not follow it", func(t *testing.T, s *scene) [][]byte {
			return [][]byte{makeTar(t, symlink("evil", s.outside), dir("evil/sub/", 0o755))}
		}},
		{"hard link to /etc/passwd", func(t *testing.T, s *scene) [][]byte {
			return [][]byte{makeTar(t, hardlink("pw", "/etc/passwd"))}
		}},
		{"hard link out with ..", func(t *testing.T, s *scene) [][]byte {
			return [][]byte{makeTar(t, hardlink("pw", "../outside/victim"))}
		}},
		{"hard link through a symlink", func(t *testing.T, s *scene) [][]byte {
			return [][]byte{makeTar(t, symlink("evil", s.outside), hardlink("pw", "evil/victim"))}
		}},
		{"hard link to a symlink", func(t *testing.T, s *scene) [][]byte {
			return [][]byte{makeTar(t, symlink("evil", s.outside+"/victim"), hardlink("pw", "evil"))}
		}},
		{"whiteout of ../../etc", func(t *testing.T, s *scene) [][]byte {
			return [][]byte{makeTar(t, file("../../.wh.etc", 0o644, ""))}
		}},
		{"whiteout of the outside", func(t *testing.T, s *scene) [][]byte {
			return [][]byte{makeTar(t, file("../.wh.outside", 0o644, ""))}
		}},
		{"whiteout of ..", func(t *testing.T, s *scene) [][]byte {
			return [][]byte{makeTar(t, dir("a/", 0o755)), makeTar(t, file("a/.wh...", 0o644, ""))}
		}},
		{"whiteout of .", func(t *testing.T, s *scene) [][]byte {
			return [][]byte{makeTar(t, file(".wh..", 0o644, ""))}
		}},
		{"whiteout through a symlink", func(t *testing.T, s *scene) [][]byte {
			return [][]byte{makeTar(t, symlink("evil", s.outside)), makeTar(t, file("evil/.wh.victim", 0o644, ""))}
		}},
		{"opaque through a symlink", func(t *testing.T, s *scene) [][]byte {
			return [][]byte{makeTar(t, symlink("evil", s.outside)), makeTar(t, file("evil/.wh..wh..opq", 0o644, ""))}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkFDs(t)
			s := newScene(t)
			_, err := s.apply(t, ApplyOptions{}, tc.layers(t, s)...)
			t.Log(err)
			if !errors.Is(err, ErrUnsafeLayer) {
				t.Errorf("Apply: %v; want ErrUnsafeLayer", err)
			}
			var ee *EntryError
			if !errors.As(err, &ee) || ee.Layer == 0 || ee.Digest == "" {
				t.Errorf("Apply: %v is not an EntryError naming its layer", err)
			}
			s.checkOutside(t)
			if b, err := os.ReadFile("/etc/passwd"); err != nil || len(b) == 0 {
				t.Fatalf("/etc/passwd: %v", err)
			}
		})
	}
}

func TestHardlinkToRootsPasswd(t *testing.T) {
	// An absolute target is the root's own file, never the host's.
	s := newScene(t)
	_, err := s.apply(t, ApplyOptions{},
		makeTar(t, dir("etc/", 0o755), file("etc/passwd", 0o644, "root:x:0:0::/root:/bin/sh\n")),
		makeTar(t, hardlink("pw", "/etc/passwd")))
	if err != nil {
		t.Fatal(err)
	}
	var a, b, host syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(s.root, "pw"), &a); err != nil {
		t.Fatal(err)
	}
	syscall.Lstat(filepath.Join(s.root, "etc/passwd"), &b)
	syscall.Lstat("/etc/passwd", &host)
	if a.Ino != b.Ino || a.Ino == host.Ino && a.Dev == host.Dev {
		t.Errorf("pw is inode %d, root's etc/passwd %d, host's %d", a.Ino, b.Ino, host.Ino)
	}
}

func TestWhiteoutSemantics(t *testing.T) {
	checkFDs(t)
	s := newScene(t)
	lower := makeTar(t,
		dir("a/", 0o755), file("a/lower", 0o644, "lower"), dir("a/sub/", 0o755), file("a/sub/deep", 0o644, "deep"),
		file("f", 0o644, "f"), dir("d/", 0o755), file("d/in", 0o644, "in"),
		file("same", 0o644, "old"), dir("todir/", 0o755), file("todir/x", 0o644, "x"),
		file("tofile", 0o644, "file"), symlink("sym", "a"),
		// Read-only directories: later layers still remove in them.
		dir("ro/", 0o555), file("ro/f", 0o444, "f"), dir("ro2/", 0o555), file("ro2/f", 0o444, "f"),
	)
	upper := makeTar(t,
		// Children first, opaque marker after: what this layer adds stays,
		// whatever the order, a merged subdirectory's lower content goes.
		dir("a/", 0o755), dir("a/sub/", 0o755), file("a/sub/upper", 0o644, "upper"), file("a/.wh..wh..opq", 0o644, ""),
		// A whiteout after the same layer's own file does not remove it.
		file("same", 0o644, "new"), file(".wh.same", 0o644, ""),
		// A whiteout before the layer's own file removes the lower one only.
		file(".wh.d", 0o644, ""), dir("d/", 0o700), file("d/new", 0o644, "new"),
		// A file over a lower directory replaces it; a directory over a
		// lower file too.
		file("todir", 0o644, "now a file"), dir("tofile/", 0o755), file("tofile/in", 0o644, "in"),
		// Whiteouts of things that are not there, and of a symlink
		// itself, are fine.
		file(".wh.nothing", 0o644, ""), file("missing/.wh.x", 0o644, ""), file(".wh.sym", 0o644, ""),
		file(".wh.ro", 0o644, ""), file("ro2/.wh..wh..opq", 0o644, ""),
	)
	st, err := s.apply(t, ApplyOptions{}, lower, upper)
	if err != nil {
		t.Fatal(err)
	}
	got := listTree(t, s.root, false)
	want := []string{
		". drwxr-xr-x",
		"a drwxr-xr-x",
		"a/sub drwxr-xr-x",
		`a/sub/upper -rw-r--r-- "upper"`,
		"d drwx------",
		`d/new -rw-r--r-- "new"`,
		`f -rw-r--r-- "f"`,
		"ro2 dr-xr-xr-x",
		`same -rw-r--r-- "new"`,
		`todir -rw-r--r-- "now a file"`,
		"tofile drwxr-xr-x",
		`tofile/in -rw-r--r-- "in"`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("tree:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if st.Whiteouts != 8 {
		t.Errorf("stats %+v: want 8 whiteouts", st)
	}
	if _, err := os.Stat(filepath.Join(s.base, "missing")); err == nil {
		t.Error("a whiteout in a missing directory made it")
	}
}

func TestDigests(t *testing.T) {
	body := makeTar(t, dir("etc/", 0o755), file("etc/hostname", 0o644, "box\n"))
	t.Run("corrupt plain blob", func(t *testing.T) {
		checkFDs(t)
		layout := oneImage(t, plainLayer(body))
		img, err := Open(context.Background(), layout, "")
		if err != nil {
			t.Fatal(err)
		}
		corrupt(t, filepath.Join(layout, "blobs/sha256", strings.TrimPrefix(img.Layers[0].Digest, "sha256:")), "box", "bad")
		_, err = Apply(context.Background(), img, t.TempDir(), ApplyOptions{})
		if !errors.Is(err, ErrDigest) {
			t.Errorf("Apply: %v; want ErrDigest", err)
		}
	})
	t.Run("corrupt gzip blob", func(t *testing.T) {
		checkFDs(t)
		l := gzipLayer(t, body)
		layout := oneImage(t, l)
		img, err := Open(context.Background(), layout, "")
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(layout, "blobs/sha256", strings.TrimPrefix(img.Layers[0].Digest, "sha256:"))
		b, _ := os.ReadFile(p)
		b[len(b)-1] ^= 1 // the gzip size field: gzip itself notices too
		writeFile(t, p, b)
		_, err = Apply(context.Background(), img, t.TempDir(), ApplyOptions{})
		if err == nil {
			t.Errorf("Apply of a corrupt blob succeeded")
		}
	})
	t.Run("blob longer than its descriptor", func(t *testing.T) {
		layout := oneImage(t, plainLayer(body))
		img, err := Open(context.Background(), layout, "")
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(layout, "blobs/sha256", strings.TrimPrefix(img.Layers[0].Digest, "sha256:"))
		writeFile(t, p, append(body, make([]byte, 512)...))
		_, err = Apply(context.Background(), img, t.TempDir(), ApplyOptions{})
		if !errors.Is(err, ErrDigest) {
			t.Errorf("Apply: %v; want ErrDigest", err)
		}
	})
	t.Run("diff id mismatch", func(t *testing.T) {
		// A sound blob whose content is not what the config says.
		l := gzipLayer(t, body)
		l.diffID = digestOf([]byte("something else"))
		img, err := Open(context.Background(), oneImage(t, l), "")
		if err != nil {
			t.Fatal(err)
		}
		_, err = Apply(context.Background(), img, t.TempDir(), ApplyOptions{})
		if !errors.Is(err, ErrDigest) || !strings.Contains(err.Error(), "diff id") {
			t.Errorf("Apply: %v; want ErrDigest for the diff id", err)
		}
		// Layer.Open alone reports it at the end of the stream.
		rc, err := img.Layers[0].Open()
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		if _, err := io.Copy(io.Discard, rc); !errors.Is(err, ErrDigest) {
			t.Errorf("reading the layer: %v; want ErrDigest", err)
		}
	})
	t.Run("zstd", func(t *testing.T) {
		need(t, "zstd", "zstd")
		checkFDs(t)
		cmd := exec.Command("zstd", "-c", "-q")
		cmd.Stdin = bytes.NewReader(body)
		z, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		layout := oneImage(t, layer{blob: z, mediaType: mtLayerZstd, diffID: digestOf(body)})
		img, err := Open(context.Background(), layout, "")
		if err != nil {
			t.Fatal(err)
		}
		rc, err := img.Layers[0].Open()
		if err != nil {
			t.Fatal(err)
		}
		if b, err := io.ReadAll(rc); err != nil || !bytes.Equal(b, body) {
			t.Errorf("reading the layer: %d bytes, %v", len(b), err)
		}
		rc.Close()
		// Closed early, zstd is stopped.
		rc, err = img.Layers[0].Open()
		if err != nil {
			t.Fatal(err)
		}
		rc.Read(make([]byte, 10))
		rc.Close()
		// A damaged blob: zstd's own checksum or the digest notices.
		p := filepath.Join(layout, "blobs/sha256", strings.TrimPrefix(img.Layers[0].Digest, "sha256:"))
		z[len(z)/2] ^= 0x55
		writeFile(t, p, z)
		if _, err := Apply(context.Background(), img, t.TempDir(), ApplyOptions{}); err == nil {
			t.Error("Apply of a damaged zstd blob succeeded")
		} else {
			t.Log(err)
		}
		// Whatever zstd makes of a blob that differs from its digest, the
		// digest is what is reported.
		cmd = exec.Command("zstd", "-c", "-q")
		cmd.Stdin = bytes.NewReader(nil)
		empty, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		z[len(z)/2] ^= 0x55
		z = append(z[:len(z)-len(empty)], empty...) // same size
		writeFile(t, p, z)
		if _, err := Apply(context.Background(), img, t.TempDir(), ApplyOptions{}); !errors.Is(err, ErrDigest) {
			t.Errorf("Apply: %v; want ErrDigest", err)
		}
	})
	t.Run("corrupt manifest", func(t *testing.T) {
		layout := oneImage(t, plainLayer(body))
		img, err := Open(context.Background(), layout, "")
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(layout, "blobs/sha256", strings.TrimPrefix(img.ManifestDigest, "sha256:"))
		corrupt(t, p, "schemaVersion", "schemaversion")
		if _, err := Open(context.Background(), layout, ""); !errors.Is(err, ErrDigest) {
			t.Errorf("Open: %v; want ErrDigest", err)
		}
	})
	for _, what := range []string{"layer", "config", "manifest"} {
		t.Run("missing "+what, func(t *testing.T) {
			layout := oneImage(t, plainLayer(body))
			img, err := Open(context.Background(), layout, "")
			if err != nil {
				t.Fatal(err)
			}
			d := map[string]string{"layer": img.Layers[0].Digest, "config": img.ConfigDigest, "manifest": img.ManifestDigest}[what]
			if err := os.Remove(filepath.Join(layout, "blobs/sha256", strings.TrimPrefix(d, "sha256:"))); err != nil {
				t.Fatal(err)
			}
			if _, err := Open(context.Background(), layout, ""); err == nil || !strings.Contains(err.Error(), "missing") {
				t.Errorf("Open: %v; want a missing blob", err)
			}
		})
	}
}

// corrupt replaces old with new, of the same length, in the file p.
func corrupt(t *testing.T, p, old, new string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("%s does not hold %q", p, old)
	}
	writeFile(t, p, bytes.Replace(b, []byte(old), []byte(new), 1))
}

func TestDevicesSkipped(t *testing.T) {
	s := newScene(t)
	st, err := s.apply(t, ApplyOptions{}, makeTar(t,
		dir("dev/", 0o755),
		ent{Hdr: tar.Header{Typeflag: tar.TypeChar, Name: "dev/null", Mode: 0o666, Devmajor: 1, Devminor: 3}},
		ent{Hdr: tar.Header{Typeflag: tar.TypeBlock, Name: "sda", Mode: 0o666, Devmajor: 8}},
		ent{Hdr: tar.Header{Typeflag: tar.TypeFifo, Name: "run/fifo", Mode: 0o666}},
	))
	if err != nil {
		t.Fatal(err)
	}
	if st.Devices != 3 {
		t.Errorf("stats %+v: want 3 devices", st)
	}
	for _, p := range []string{"dev/null", "sda", "run/fifo"} {
		if _, err := os.Lstat(filepath.Join(s.root, p)); err == nil {
			t.Errorf("%s was made", p)
		}
	}
}

func TestLimits(t *testing.T) {
	s := newScene(t)
	_, err := s.apply(t, ApplyOptions{MaxEntries: 3}, makeTar(t, file("a", 0o644, "")), makeTar(t, file("b", 0o644, ""), file("c/d/e", 0o644, "")))
	if !errors.Is(err, ErrLimit) {
		t.Errorf("MaxEntries: %v; want ErrLimit", err)
	}
	s = newScene(t)
	_, err = s.apply(t, ApplyOptions{MaxBytes: 10}, makeTar(t, file("a", 0o644, "123456")), makeTar(t, file("b", 0o644, "123456")))
	if !errors.Is(err, ErrLimit) {
		t.Errorf("MaxBytes: %v; want ErrLimit", err)
	}
	s = newScene(t)
	if _, err = s.apply(t, ApplyOptions{MaxBytes: 12}, makeTar(t, file("a", 0o644, "123456")), makeTar(t, file("b", 0o644, "123456"))); err != nil {
		t.Errorf("at the limit: %v", err)
	}
}

func TestOwnership(t *testing.T) {
	layers := [][]byte{makeTar(t,
		owned(dir("home/user/", 0o750), 1000, 1000),
		owned(file("home/user/f", 0o644, "f"), 1000, 1001),
		owned(file("bin/su", 0o4755, "su"), 0, 0),
		owned(symlink("home/user/l", "f"), 1000, 1000),
	)}
	t.Run("caller", func(t *testing.T) {
		s := newScene(t)
		if _, err := s.apply(t, ApplyOptions{}, layers...); err != nil {
			t.Fatal(err)
		}
		uid := os.Geteuid()
		for _, p := range []string{"home/user/f", "home/user/l", "home"} {
			var st syscall.Stat_t
			syscall.Lstat(filepath.Join(s.root, p), &st)
			if int(st.Uid) != uid {
				t.Errorf("%s belongs to %d, not the caller %d", p, st.Uid, uid)
			}
		}
		if fi, _ := os.Stat(filepath.Join(s.root, "bin/su")); fi.Mode() != 0o755 {
			t.Errorf("bin/su mode %v; want setuid dropped", fi.Mode())
		}
	})
	t.Run("chown with a shift", func(t *testing.T) {
		if !isRoot() {
			t.Skip("needs root")
		}
		const shift = 100000
		s := newScene(t)
		if _, err := s.apply(t, ApplyOptions{Chown: true, UIDShift: shift, KeepSUID: true}, layers...); err != nil {
			t.Fatal(err)
		}
		for p, want := range map[string][2]uint32{
			".": {shift, shift}, "home": {shift, shift}, "home/user": {shift + 1000, shift + 1000},
			"home/user/f": {shift + 1000, shift + 1001}, "home/user/l": {shift + 1000, shift + 1000}, "bin/su": {shift, shift},
		} {
			var st syscall.Stat_t
			syscall.Lstat(filepath.Join(s.root, p), &st)
			if st.Uid != want[0] || st.Gid != want[1] {
				t.Errorf("%s belongs to %d:%d; want %d:%d", p, st.Uid, st.Gid, want[0], want[1])
			}
		}
		if fi, _ := os.Stat(filepath.Join(s.root, "bin/su")); fi.Mode() != 0o755|os.ModeSetuid {
			t.Errorf("bin/su mode %v; want setuid kept", fi.Mode())
		}
	})
	t.Run("owners past the sandbox's ids", func(t *testing.T) {
		if !isRoot() {
			t.Skip("needs root")
		}
		for _, ids := range [][2]int{{65536, 0}, {0, 1 << 31}} {
			s := newScene(t)
			_, err := s.apply(t, ApplyOptions{Chown: true, UIDShift: 100000},
				makeTar(t, owned(file("f", 0o644, "f"), ids[0], ids[1])))
			if !errors.Is(err, ErrUnsafeLayer) || !strings.Contains(err.Error(), "outside the 65536 ids") {
				t.Errorf("owner %d:%d: got %v", ids[0], ids[1], err)
			}
		}
	})
	t.Run("bad options", func(t *testing.T) {
		for _, opt := range []ApplyOptions{{KeepSUID: true}, {KeepSUID: true, Chown: true}, {UIDShift: 5}} {
			s := newScene(t)
			if _, err := s.apply(t, opt, layers...); err == nil {
				t.Errorf("Apply with %+v succeeded", opt)
			}
		}
	})
}

func TestEmptyLayers(t *testing.T) {
	// Docker's empty layer is a tar of only its end marker; an image may
	// also have no layers at all.
	s := newScene(t)
	st, err := s.apply(t, ApplyOptions{}, makeTar(t), makeTar(t, file("a", 0o644, "a")), makeTar(t))
	if err != nil || st.Layers != 3 {
		t.Fatalf("Apply: %+v, %v", st, err)
	}
	s = newScene(t)
	if _, err := s.apply(t, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestCanceled(t *testing.T) {
	img, err := Open(context.Background(), oneImage(t, plainLayer(makeTar(t, file("a", 0o644, "a")))), "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Apply(ctx, img, t.TempDir(), ApplyOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Apply: %v; want context.Canceled", err)
	}
}
