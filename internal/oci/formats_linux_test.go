package oci

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// tarDir tars dir with the host's tar, as a person building a layer would.
func tarDir(t testing.TB, dir string) []byte {
	t.Helper()
	need(t, "tar", "tar")
	cmd := exec.Command("tar", "-C", dir, "--numeric-owner", "-cf", "-", ".")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tar -C %s: %v", dir, err)
	}
	return out
}

// mkTree makes files below dir: a name ending in "/" is a directory, a
// body starting with "->" a symlink.
func mkTree(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(body, "->"); ok {
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		writeFile(t, p, []byte(body))
	}
}

var testConfig = map[string]any{
	"Env":        []string{"PATH=/usr/bin:/bin", "FOO=bar"},
	"Entrypoint": []string{"/bin/tool"},
	"Cmd":        []string{"--help"},
	"WorkingDir": "/usr/share",
	"User":       "1000:1000",
}

// realImage builds a two-layer image from directories with the host's tar:
// a gzip base layer and a second layer (zstd when zstd is installed) that
// deletes a file and a directory, makes a directory opaque, changes a file
// and replaces a directory with a file. It returns the layout, and a second
// layout with the same layers all gzip, for docker images, which cannot
// have zstd layers.
func realImage(t testing.TB) (layout, gzipLayout string) {
	t.Helper()
	base := t.TempDir()
	r1 := filepath.Join(base, "rootfs1")
	mkTree(t, r1, map[string]string{
		"etc/hostname":        "box\n",
		"etc/motd":            "hello\n",
		"bin/tool":            "#!/bin/sh\necho tool\n",
		"bin/suid":            "#!/bin/sh\n",
		"usr/share/doc/a.txt": "a\n",
		"usr/share/empty/":    "",
		"opq/lower1":          "lower1\n",
		"opq/sub/lower2":      "lower2\n",
		"gone.txt":            "gone\n",
		"gonedir/x":           "x\n",
		"gonedir/y/z":         "z\n",
		"replaced-dir/inner":  "inner\n",
		"link":                "->etc/hostname",
		"abs":                 "->/etc/motd",
	})
	for p, m := range map[string]os.FileMode{"bin/tool": 0o755, "bin/suid": 0o755 | os.ModeSetuid, "etc/motd": 0o600, "usr/share/empty": 0o555} {
		if err := os.Chmod(filepath.Join(r1, p), m); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(r1, "bin/tool"), filepath.Join(r1, "bin/tool-hard")); err != nil {
		t.Fatal(err)
	}
	l1 := gzipLayer(t, tarDir(t, r1))

	r2 := filepath.Join(base, "rootfs2")
	mkTree(t, r2, map[string]string{
		".wh.gone.txt":                "",
		".wh.gonedir":                 "",
		"opq/.wh..wh..opq":            "",
		"opq/upper":                   "upper\n",
		"etc/motd":                    "changed\n",
		"replaced-dir":                "now a file\n",
		"new/dir/file":                "new\n",
		"usr/share/doc/b":             "b\n",
		"usr/share/doc/.wh..wh.plnk/": "",
	})
	tar2 := tarDir(t, r2)
	l2 := gzipLayer(t, tar2)
	g := newLayout(t, filepath.Join(base, "gzip-layout"))
	g.index(named(g.image("", testConfig, l1, l2), "v1"))
	if _, err := exec.LookPath("zstd"); err == nil {
		cmd := exec.Command("zstd", "-c", "-q")
		cmd.Stdin = strings.NewReader(string(tar2))
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("zstd: %v", err)
		}
		l2 = layer{blob: out, mediaType: mtLayerZstd, diffID: digestOf(tar2)}
	}
	l := newLayout(t, filepath.Join(base, "layout"))
	l.index(named(l.image("", testConfig, l1, l2), "v1"))
	return l.dir, g.dir
}

// checkRealTree checks what realImage's layers leave.
func checkRealTree(t *testing.T, root string) {
	t.Helper()
	for _, p := range []string{"gone.txt", "gonedir", "opq/lower1", "opq/sub", ".wh.gone.txt", "opq/.wh..wh..opq", "usr/share/doc/.wh..wh.plnk"} {
		if _, err := os.Lstat(filepath.Join(root, p)); !os.IsNotExist(err) {
			t.Errorf("%s: want it gone, got %v", p, err)
		}
	}
	for p, want := range map[string]string{
		"etc/motd":            "changed\n",
		"etc/hostname":        "box\n",
		"opq/upper":           "upper\n",
		"replaced-dir":        "now a file\n",
		"new/dir/file":        "new\n",
		"usr/share/doc/a.txt": "a\n",
		"usr/share/doc/b":     "b\n",
		"bin/tool-hard":       "#!/bin/sh\necho tool\n",
	} {
		if b, err := os.ReadFile(filepath.Join(root, p)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", p, b, err, want)
		}
	}
	for p, want := range map[string]os.FileMode{"bin/suid": 0o755, "bin/tool": 0o755, "etc/hostname": 0o644, "usr/share/empty": os.ModeDir | 0o555} {
		if fi, err := os.Lstat(filepath.Join(root, p)); err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v, %v; want %v", p, fi.Mode(), err, want)
		}
	}
	for p, want := range map[string]string{"link": "etc/hostname", "abs": "/etc/motd"} {
		if got, err := os.Readlink(filepath.Join(root, p)); err != nil || got != want {
			t.Errorf("%s -> %q, %v; want %q", p, got, err, want)
		}
	}
	var a, b syscall.Stat_t
	if syscall.Lstat(filepath.Join(root, "bin/tool"), &a) != nil || syscall.Lstat(filepath.Join(root, "bin/tool-hard"), &b) != nil || a.Ino != b.Ino {
		t.Errorf("bin/tool-hard is not a hard link of bin/tool")
	}
}

func TestRealImage(t *testing.T) {
	checkFDs(t)
	layout, gzipLayout := realImage(t)
	img, err := Open(context.Background(), layout, "")
	if err != nil {
		t.Fatal(err)
	}
	if img.Format != "oci-layout" || img.Source != layout || len(img.Layers) != 2 {
		t.Fatalf("image: %+v", img)
	}
	want := ImageConfig{Env: []string{"PATH=/usr/bin:/bin", "FOO=bar"}, Entrypoint: []string{"/bin/tool"}, Cmd: []string{"--help"}, WorkingDir: "/usr/share", User: "1000:1000"}
	if !configEqual(img.Config, want) {
		t.Errorf("config %+v, want %+v", img.Config, want)
	}
	// The manifest digest names the manifest blob.
	idx, err := os.ReadFile(filepath.Join(layout, "index.json"))
	if err != nil || !strings.Contains(string(idx), img.ManifestDigest) {
		t.Errorf("manifest digest %s is not the one index.json lists", img.ManifestDigest)
	}
	root := filepath.Join(t.TempDir(), "root")
	os.Mkdir(root, 0o700)
	st, err := Apply(context.Background(), img, root, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkRealTree(t, root)
	if st.Layers != 2 || st.Whiteouts != 3 || st.Removed < 7 {
		t.Errorf("stats %+v: want 2 layers, 3 whiteouts, 7 or more removed", st)
	}
	tree := listTree(t, root, isRoot())

	// The same image as docker-archive and oci-archive, written by
	// skopeo, gives the same tree.
	for _, tc := range []struct{ format, dest, ref string }{
		{"docker-archive", "docker-archive:%s:pinfold/test:v1", "pinfold/test:v1"},
		{"oci-archive", "oci-archive:%s:v1", "v1"},
	} {
		t.Run(tc.format, func(t *testing.T) {
			need(t, "skopeo", "skopeo")
			src := layout
			if tc.format == "docker-archive" {
				src = gzipLayout
			}
			out := filepath.Join(t.TempDir(), tc.format+".tar")
			run(t, []string{"TMPDIR=" + t.TempDir()}, "skopeo", "--insecure-policy", "copy", "--quiet",
				"oci:"+src+":v1", strings.Replace(tc.dest, "%s", out, 1))
			for _, ref := range []string{"", tc.ref} {
				root, img2, _, err := applyTo(t, out, ref, ApplyOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if img2.Format != tc.format || len(img2.Layers) != 2 || !configEqual(img2.Config, want) {
					t.Errorf("image %+v", img2)
				}
				// skopeo keeps the config's bytes: the image id holds.
				if img2.ConfigDigest != img.ConfigDigest {
					t.Errorf("config digest %s, layout's %s", img2.ConfigDigest, img.ConfigDigest)
				}
				if tc.format == "docker-archive" && img2.ManifestDigest != img2.ConfigDigest {
					t.Errorf("manifest digest %s is not the config digest", img2.ManifestDigest)
				}
				for i, l := range img2.Layers {
					if l.DiffID != img.Layers[i].DiffID || l.Digest == "" {
						t.Errorf("layer %d: %+v, layout's %+v", i, l, img.Layers[i])
					}
				}
				checkRealTree(t, root)
				if got := listTree(t, root, isRoot()); !slices.Equal(got, tree) {
					t.Errorf("tree differs from the layout's:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tree, "\n"))
				}
			}
			if _, err := Open(context.Background(), out, "other:v1"); err == nil || !strings.Contains(err.Error(), "no image named") {
				t.Errorf("Open with another ref: %v", err)
			}
		})
	}
}

// TestPodmanSave checks the forms podman save writes, of the image
// realImage builds, loaded into a podman store of the test's own.
func TestPodmanSave(t *testing.T) {
	need(t, "skopeo", "skopeo")
	need(t, "podman", "podman")
	if !isRoot() {
		t.Skip("podman without root needs subordinate ids; run as root")
	}
	layout, gzipLayout := realImage(t)
	want, err := Open(context.Background(), layout, "")
	if err != nil {
		t.Fatal(err)
	}
	root, _, _, err := applyTo(t, layout, "", ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tree := listTree(t, root, true)

	dir := t.TempDir()
	env := []string{"TMPDIR=" + t.TempDir()}
	archive := filepath.Join(dir, "skopeo.tar")
	run(t, env, "skopeo", "--insecure-policy", "copy", "--quiet", "oci:"+gzipLayout+":v1", "docker-archive:"+archive+":pinfold/test:v1")
	podman := []string{"--root", filepath.Join(dir, "storage"), "--runroot", filepath.Join(dir, "run"),
		"--storage-driver", "vfs", "--events-backend", "none", "--cgroup-manager", "cgroupfs"}
	run(t, env, "podman", append(podman, "load", "-q", "-i", archive)...)
	for _, tc := range []struct{ format, podman string }{
		{"docker-archive", "docker-archive"},
		{"oci-archive", "oci-archive"},
		{"oci-layout", "oci-dir"},
	} {
		t.Run(tc.format, func(t *testing.T) {
			out := filepath.Join(dir, tc.podman)
			run(t, env, "podman", append(podman, "save", "-q", "--format", tc.podman, "-o", out, "pinfold/test:v1")...)
			root, img, _, err := applyTo(t, out, "pinfold/test:v1", ApplyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if img.Format != tc.format || !configEqual(img.Config, want.Config) {
				t.Errorf("image %+v", img)
			}
			// podman writes the config anew for OCI forms (other key
			// order), so only its docker-archive keeps the image id.
			if tc.format == "docker-archive" && img.ConfigDigest != want.ConfigDigest {
				t.Errorf("config digest %s, layout's %s", img.ConfigDigest, want.ConfigDigest)
			}
			if got := listTree(t, root, true); !slices.Equal(got, tree) {
				t.Errorf("tree differs from the layout's:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tree, "\n"))
			}
		})
	}
}

func configEqual(a, b ImageConfig) bool {
	return slices.Equal(a.Env, b.Env) && slices.Equal(a.Entrypoint, b.Entrypoint) && slices.Equal(a.Cmd, b.Cmd) &&
		a.WorkingDir == b.WorkingDir && a.User == b.User
}
