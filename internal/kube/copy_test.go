package kube

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func write(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(content, "->") {
			if err := os.Symlink(content[2:], p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// isWhiteout reports an overlayfs whiteout in either form.
func isWhiteout(p string) bool {
	var st unix.Stat_t
	if unix.Lstat(p, &st) != nil {
		return false
	}
	if st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0 {
		return true
	}
	b := make([]byte, 8)
	n, err := unix.Lgetxattr(p, "user.overlay.whiteout", b)
	return err == nil && n >= 0
}

// TestToUpper sends a changed copy of a directory through WriteTar and
// ToUpper and checks the upper directory holds exactly the changes.
func TestToUpper(t *testing.T) {
	lower, pod, upper := t.TempDir(), t.TempDir(), t.TempDir()
	base := map[string]string{"kept": "same\n", "changed": "old\n", "gone": "x\n", "d/gone2": "y\n", "d/stay": "s\n",
		"tree/a/b": "deep\n", "swap": "file\n", "link": "->kept", "relink": "->kept"}
	write(t, lower, base)
	write(t, pod, base)
	os.WriteFile(filepath.Join(pod, "changed"), []byte("new\n"), 0o644)
	os.Remove(filepath.Join(pod, "gone"))
	os.Remove(filepath.Join(pod, "d/gone2"))
	os.RemoveAll(filepath.Join(pod, "tree"))
	os.Remove(filepath.Join(pod, "swap"))
	write(t, pod, map[string]string{"swap/inner": "in\n", "added/new": "n\n"})
	os.Remove(filepath.Join(pod, "relink"))
	os.Symlink("changed", filepath.Join(pod, "relink"))
	os.Chmod(filepath.Join(pod, "d/stay"), 0o600)

	var buf bytes.Buffer
	if err := WriteTar(&buf, []Dir{{Src: pod, Name: "."}}); err != nil {
		t.Fatal(err)
	}
	n, err := ToUpper(&buf, lower, upper)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	filepath.Walk(upper, func(p string, fi os.FileInfo, err error) error {
		rel, _ := filepath.Rel(upper, p)
		switch {
		case p == upper:
		case isWhiteout(p):
			got[rel] = "whiteout"
		case fi.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			got[rel] = "->" + l
		case fi.IsDir():
			got[rel] = "dir"
		default:
			b, _ := os.ReadFile(p)
			got[rel] = string(b) + " " + fi.Mode().Perm().String()
		}
		return nil
	})
	want := map[string]string{"changed": "new\n -rw-r--r--", "gone": "whiteout", "d": "dir", "d/gone2": "whiteout",
		"d/stay": "s\n -rw-------", "tree": "whiteout", "swap": "dir", "swap/inner": "in\n -rw-r--r--",
		"added": "dir", "added/new": "n\n -rw-r--r--", "relink": "->changed"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %q, want %q", k, got[k], v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s in the upper directory (%q), but it did not change", k, v)
		}
	}
	if n != len(want)-1 { // "d" is only the parent of changes
		t.Errorf("ToUpper counted %d entries, want %d", n, len(want)-1)
	}
}

// TestToUpperRefuses checks that a pod's tar cannot write outside the
// upper directory.
func TestToUpperRefuses(t *testing.T) {
	outside := t.TempDir()
	for name, entries := range map[string][]tar.Header{
		"twice, through a link": {{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outside + "/written", Mode: 0o777},
			{Name: "l", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3}},
		"dotdot":        {{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o644}},
		"absolute":      {{Name: "/etc/escape", Typeflag: tar.TypeReg, Mode: 0o644}},
		"below symlink": {{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/", Mode: 0o777}, {Name: "l/escape", Typeflag: tar.TypeReg, Mode: 0o644}},
		"no parent":     {{Name: "a/b", Typeflag: tar.TypeReg, Mode: 0o644}},
	} {
		t.Run(name, func(t *testing.T) {
			lower, upper := t.TempDir(), t.TempDir()
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			for _, h := range entries {
				h := h
				tw.WriteHeader(&h)
				if h.Size > 0 {
					tw.Write([]byte("abc"))
				}
			}
			tw.Close()
			if _, err := ToUpper(&buf, lower, filepath.Join(upper)); err == nil {
				t.Errorf("accepted")
			}
			if _, err := os.Lstat("/escape"); err == nil {
				t.Errorf("wrote /escape")
			}
			ents, _ := os.ReadDir(outside)
			if len(ents) > 0 {
				t.Errorf("wrote outside: %v", ents)
			}
		})
	}
}

// TestToUpperLarge checks a large unchanged file stays out of the upper
// directory and a changed one of the same size goes in whole.
func TestToUpperLarge(t *testing.T) {
	lower, pod, upper := t.TempDir(), t.TempDir(), filepath.Join(t.TempDir(), "upper")
	os.Mkdir(upper, 0o755)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	os.WriteFile(filepath.Join(lower, "same"), big, 0o644)
	os.WriteFile(filepath.Join(pod, "same"), big, 0o644)
	os.WriteFile(filepath.Join(lower, "flipped"), big, 0o644)
	flipped := bytes.Clone(big)
	flipped[len(flipped)-1] = 'X'
	os.WriteFile(filepath.Join(pod, "flipped"), flipped, 0o644)
	var buf bytes.Buffer
	if err := WriteTar(&buf, []Dir{{Src: pod, Name: "."}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ToUpper(&buf, lower, upper); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(upper, "same")); err == nil {
		t.Errorf("an unchanged file is in the upper directory")
	}
	if b, _ := os.ReadFile(filepath.Join(upper, "flipped")); !bytes.Equal(b, flipped) {
		t.Errorf("the changed file is not in the upper directory whole (%d bytes)", len(b))
	}
	if ents, _ := os.ReadDir(filepath.Dir(upper)); len(ents) != 1 {
		t.Errorf("temporary files left beside the upper directory: %v", ents)
	}
}

// TestWriteTarDone checks that a file's Done marker follows the whole
// file in the stream: in the pod, it says the file is complete.
func TestWriteTarDone(t *testing.T) {
	src := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(src, bytes.Repeat([]byte("x"), 70000), 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteTar(&buf, []Dir{{Src: src, Name: "agent", FileName: "pinfold", Done: "ready"}}); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&buf)
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
		if h.Name == "agent/pinfold" && h.Size != 70000 {
			t.Errorf("the file's size is %d", h.Size)
		}
		if h.Name == "agent/ready" && (h.Size != 0 || h.Typeflag != tar.TypeReg) {
			t.Errorf("the marker: size %d type %c", h.Size, h.Typeflag)
		}
	}
	if strings.Join(names, " ") != "agent/pinfold agent/ready" {
		t.Errorf("entries %v, want the file then its marker", names)
	}
}
