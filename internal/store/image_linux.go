package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Derived images are a base plus a layer of packages, named by their
// sandbox id:
//
//	images/<hex>/rootfs/          the base with the layer applied (files the layer does not change are hard links into the base)
//	images/<hex>/layer/<dir>/upper  what installing the packages wrote, per top-level directory (overlayfs form)
//	images/<hex>/manifest.json    {"id","base","capabilities","packages","created","pinfold_version","format"}

// IDFormat is the version of the sandbox id's encoding; a change gives
// every sandbox a new id.
const IDFormat = 1

// SandboxID is the identity of a sandbox's system: the sha256 of a
// canonical encoding of the base's id, the sorted capabilities, the
// environment profile (the NAME=VALUE variables set) and IDFormat. The same
// inputs give the same id on any machine.
func SandboxID(baseID string, caps, env []string) string {
	c := append([]string(nil), caps...)
	sort.Strings(c)
	c = compactStrings(c)
	e := append([]string(nil), env...)
	sort.Strings(e)
	h := sha256.New()
	field := func(k, v string) {
		fmt.Fprintf(h, "%s %d:%s\n", k, len(v), v)
	}
	field("format", fmt.Sprint(IDFormat))
	field("base", baseID)
	for _, x := range c {
		field("capability", x)
	}
	for _, x := range e {
		field("env", x)
	}
	return digestPrefix + hex.EncodeToString(h.Sum(nil))
}

func compactStrings(s []string) []string {
	out := s[:0]
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// ImageInfo describes a derived image.
type ImageInfo struct {
	ID           string   `json:"id"`
	Base         string   `json:"base"`
	Capabilities []string `json:"capabilities"`
	Packages     []string `json:"packages"`
	Created      string   `json:"created"`
	Version      string   `json:"pinfold_version"`
	Format       int      `json:"format"`
	Root         string   `json:"-"`
}

// ErrFormat: a store object was written by another format version.
var ErrFormat = errors.New("store object of another format version")

// Image finds the derived image with the sandbox id id: one stat and one
// small read.
func (s *Store) Image(id string) (ImageInfo, error) {
	hexSum, ok := strings.CutPrefix(id, digestPrefix)
	if !ok || !isHex(hexSum) {
		return ImageInfo{}, fmt.Errorf("bad sandbox id %q", id)
	}
	dir := s.dir + "/images/" + hexSum
	b, err := os.ReadFile(dir + "/manifest.json")
	if err != nil {
		return ImageInfo{}, err
	}
	var m ImageInfo
	if err := json.Unmarshal(b, &m); err != nil {
		return ImageInfo{}, fmt.Errorf("image %s: %w", id, err)
	}
	if m.Format != manifestFormat {
		return ImageInfo{}, fmt.Errorf("image %s: %w (%d, this pinfold reads %d): pinfold gc removes it, the next run rebuilds it", id, ErrFormat, m.Format, manifestFormat)
	}
	m.Root = dir + "/rootfs"
	return m, nil
}

// Images lists the derived images, newest first.
func (s *Store) Images() ([]ImageInfo, error) {
	entries, err := os.ReadDir(s.dir + "/images")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []ImageInfo
	for _, e := range entries {
		if m, err := s.Image(digestPrefix + e.Name()); err == nil {
			out = append(out, m)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Created > out[j].Created })
	return out, nil
}

// BuildImage makes the derived image id from base: install runs the
// package manager in a sandbox whose base writes land under the directory
// it is given (sandbox.Spec.BaseWrites); the result is put in place
// whole, or not at all.
func (s *Store) BuildImage(ctx context.Context, m ImageInfo, base Base, install func(ctx context.Context, writes string) error) (_ ImageInfo, err error) {
	hexSum, ok := strings.CutPrefix(m.ID, digestPrefix)
	if !ok || !isHex(hexSum) {
		return ImageInfo{}, fmt.Errorf("bad sandbox id %q", m.ID)
	}
	for _, d := range [...]string{"tmp", "images"} {
		if err := os.MkdirAll(s.dir+"/"+d, 0o700); err != nil {
			return ImageInfo{}, err
		}
	}
	unlock, err := s.lock(ctx, "image-"+hexSum)
	if err != nil {
		return ImageInfo{}, err
	}
	defer unlock()
	if done, err := s.Image(m.ID); err == nil { // built while this one waited
		return done, nil
	}
	work, err := s.newWorkDir()
	if err != nil {
		return ImageInfo{}, err
	}
	keep := false
	defer func() {
		if !keep {
			removeTree(work)
		}
	}()
	// Sandboxes reach the layer through its parents.
	os.Chmod(work, 0o711)
	if err := os.Mkdir(work+"/layer", 0o755); err != nil {
		return ImageInfo{}, err
	}
	if err := install(ctx, work+"/layer"); err != nil {
		return ImageInfo{}, err
	}
	if err := linkTree(base.Root, work+"/rootfs"); err != nil {
		return ImageInfo{}, fmt.Errorf("building image: %w", err)
	}
	if err := applyLayer(work+"/layer", work+"/rootfs"); err != nil {
		return ImageInfo{}, fmt.Errorf("building image: %w", err)
	}
	m.Base, m.Created, m.Format = base.Digest, time.Now().UTC().Format(time.RFC3339), manifestFormat
	if err := writeJSON(work+"/manifest.json", &m, 0o644); err != nil {
		return ImageInfo{}, err
	}
	if err := syncDir(work); err != nil {
		return ImageInfo{}, err
	}
	final := s.dir + "/images/" + hexSum
	won, err := commitDir(work, final)
	if err != nil {
		return ImageInfo{}, fmt.Errorf("building image: %w", err)
	}
	keep = won
	return s.Image(m.ID)
}

// linkTree copies the tree at src to dst with hard links for files:
// neither changes once in place, and applyLayer replaces files by
// unlinking them first.
func linkTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if err := os.Mkdir(to, 0o700); err != nil {
				return err
			}
			return copyMeta(to, &st)
		case unix.S_IFLNK:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(t, to); err != nil {
				return err
			}
			return unix.Lchown(to, int(st.Uid), int(st.Gid))
		case unix.S_IFREG:
			return os.Link(p, to)
		}
		return nil // devices, fifos, sockets: the sandbox makes its own /dev
	})
}

// copyMeta gives path the owner and mode of st.
func copyMeta(path string, st *unix.Stat_t) error {
	if err := unix.Lchown(path, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	return unix.Chmod(path, st.Mode&0o7777)
}

// applyLayer applies overlayfs upper directories (layer/<dir>/upper) to
// root: whiteouts (0:0 character devices) delete, opaque directories
// (user.overlay.opaque) hide what the base had there, everything else
// replaces.
func applyLayer(layer, root string) error {
	tops, err := os.ReadDir(layer)
	if err != nil {
		return err
	}
	for _, top := range tops {
		upper := filepath.Join(layer, top.Name(), "upper")
		if _, err := os.Lstat(upper); err != nil {
			continue
		}
		err := filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(upper, p)
			to := filepath.Join(root, top.Name(), rel)
			var st unix.Stat_t
			if err := unix.Lstat(p, &st); err != nil {
				return err
			}
			if rel == "." {
				return nil
			}
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFCHR:
				if st.Rdev == 0 { // whiteout
					return os.RemoveAll(to)
				}
				return nil
			case unix.S_IFDIR:
				if fi, err := os.Lstat(to); err == nil && !fi.IsDir() {
					os.Remove(to)
				}
				opaque := isOpaque(p)
				if opaque {
					os.RemoveAll(to)
				}
				if err := os.Mkdir(to, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
					return err
				}
				return copyMeta(to, &st)
			case unix.S_IFLNK:
				os.RemoveAll(to)
				t, err := os.Readlink(p)
				if err != nil {
					return err
				}
				if err := os.Symlink(t, to); err != nil {
					return err
				}
				return unix.Lchown(to, int(st.Uid), int(st.Gid))
			case unix.S_IFREG:
				os.RemoveAll(to)
				return copyFile(p, to, &st)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func isOpaque(dir string) bool {
	var b [4]byte
	for _, name := range []string{"user.overlay.opaque", "trusted.overlay.opaque"} {
		if n, err := unix.Lgetxattr(dir, name, b[:]); err == nil && n == 1 && b[0] == 'y' {
			return true
		}
	}
	return false
}

func copyFile(src, dst string, st *unix.Stat_t) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	if err := copyMeta(dst, st); err != nil {
		return err
	}
	return unix.UtimesNanoAt(unix.AT_FDCWD, dst, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW)
}
