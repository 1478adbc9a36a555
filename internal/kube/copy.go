package kube

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/internal/untrusted"
)

// Dir is a host directory sent into the pod under Name.
type Dir struct {
	Src  string
	Name string
	// FileName, when Src is a regular file, is its name under Name.
	FileName string
	// Done, with FileName, names an empty file written after it: in the
	// pod, that the file is whole.
	Done string
	// Root: Name is a directory of the tar too (the pod's mount point is
	// above it), with Src's mode.
	Root bool
}

// WriteTar writes the directories' contents (not the directories
// themselves: they are the pod's mount points) as one tar stream, each
// under its Name. Regular files, directories and symbolic links are
// carried; devices, sockets and fifos are not. Owners are not carried: the
// pod's user owns what it unpacks.
func WriteTar(w io.Writer, dirs []Dir) error {
	tw := tar.NewWriter(w)
	for _, d := range dirs {
		if d.Root {
			fi, err := os.Stat(d.Src)
			if err != nil {
				return err
			}
			h := &tar.Header{Name: d.Name + "/", Typeflag: tar.TypeDir, Mode: int64(fi.Mode().Perm()) | 0o700, ModTime: fi.ModTime(), Format: tar.FormatPAX}
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
		}
		if d.FileName != "" {
			if err := writeFile(tw, d.Src, d.Name+"/"+d.FileName); err != nil {
				return err
			}
			if d.Done != "" {
				h := &tar.Header{Name: d.Name + "/" + d.Done, Typeflag: tar.TypeReg, Mode: 0o444, ModTime: time.Now(), Format: tar.FormatPAX}
				if err := tw.WriteHeader(h); err != nil {
					return err
				}
			}
			continue
		}
		err := filepath.WalkDir(d.Src, func(p string, de fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p == d.Src {
				return nil
			}
			rel, err := filepath.Rel(d.Src, p)
			if err != nil {
				return err
			}
			fi, err := de.Info()
			if err != nil {
				return err
			}
			name := d.Name + "/" + filepath.ToSlash(rel)
			h := &tar.Header{Name: name, Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime(), Format: tar.FormatPAX}
			switch {
			case fi.Mode().IsDir():
				// The copy is filled by the pod's user: a directory must be
				// writable to it (ToUpper does not count this bit).
				h.Typeflag, h.Name, h.Mode = tar.TypeDir, name+"/", h.Mode|0o700
			case fi.Mode()&fs.ModeSymlink != 0:
				h.Typeflag = tar.TypeSymlink
				if h.Linkname, err = os.Readlink(p); err != nil {
					return err
				}
			case fi.Mode().IsRegular():
				h.Typeflag, h.Size = tar.TypeReg, fi.Size()
			default:
				return nil
			}
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if h.Typeflag != tar.TypeReg {
				return nil
			}
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := io.CopyN(tw, f, h.Size); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return tw.Close()
}

// writeFile writes the regular file src as name.
func writeFile(tw *tar.Writer, src, name string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	h := &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: int64(fi.Mode().Perm()), Size: fi.Size(), ModTime: fi.ModTime(), Format: tar.FormatPAX}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, f, h.Size); err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	return nil
}

// entry is what the pod's tar said about one path.
type entry struct {
	dir bool
	// fresh: the path is new in the pod, or replaced what the lower
	// directory had, so nothing below it is compared with the lower.
	fresh bool
}

// ToUpper reads the pod's tar of a directory whose original is lower and
// writes what differs into upper as an overlayfs upper directory: new and
// changed entries as they are in the pod, deleted ones as whiteouts. It
// returns the number of entries written. The tar comes from the pod and
// is not trusted: names must stay below the root, and an entry below a
// path the tar did not show as a directory is refused.
func ToUpper(r io.Reader, lower, upper string) (int, error) {
	seen := map[string]entry{".": {dir: true}}
	n := 0
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, fmt.Errorf("reading the pod's files: %w", err)
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if name == "." || name == "" {
			continue
		}
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return n, fmt.Errorf("the pod's tar names %q, outside the workspace", h.Name)
		}
		parent, ok := seen[path.Dir(name)]
		if !ok || !parent.dir {
			return n, fmt.Errorf("the pod's tar names %q below something that is not a directory", h.Name)
		}
		if _, dup := seen[name]; dup {
			// A second entry could be written through the first (a
			// symbolic link): refused.
			return n, fmt.Errorf("the pod's tar names %q twice", h.Name)
		}
		lp := filepath.Join(lower, filepath.FromSlash(name))
		up := filepath.Join(upper, filepath.FromSlash(name))
		var lfi fs.FileInfo
		if !parent.fresh {
			lfi, _ = os.Lstat(lp)
		}
		e := entry{fresh: lfi == nil}
		switch h.Typeflag {
		case tar.TypeDir:
			e.dir = true
			if lfi != nil && !lfi.IsDir() {
				e.fresh = true
			}
			// WriteTar gave the copy's directories u+rwx: a directory the
			// command did not change differs from its original in those
			// bits alone, and is not a change.
			if e.fresh || lfi.Mode().Perm()|0o700 != fs.FileMode(h.Mode).Perm()|0o700 {
				if err := mkdirUpper(upper, name, lower, fs.FileMode(h.Mode).Perm(), e.fresh); err != nil {
					return n, err
				}
				n++
			}
		case tar.TypeSymlink:
			if lfi != nil && lfi.Mode()&fs.ModeSymlink != 0 {
				if t, err := os.Readlink(lp); err == nil && t == h.Linkname {
					break
				}
			}
			if err := prepare(upper, name, lower); err != nil {
				return n, err
			}
			if err := os.Symlink(h.Linkname, up); err != nil {
				return n, err
			}
			n++
		case tar.TypeReg, tar.TypeLink:
			var src io.Reader = tr
			size := h.Size
			if h.Typeflag == tar.TypeLink {
				// A hard link: the content of an entry seen before, in the
				// upper directory if it changed, else in the lower one.
				target := path.Clean(strings.TrimPrefix(h.Linkname, "./"))
				if te, ok := seen[target]; !ok || te.dir {
					return n, fmt.Errorf("the pod's tar links %q to %q, which it did not hold before", h.Name, h.Linkname)
				}
				root := upper
				if _, err := os.Lstat(filepath.Join(upper, filepath.FromSlash(target))); err != nil {
					root = lower
				}
				f, fi, err := openRegularIn(root, filepath.FromSlash(target))
				if err != nil {
					return n, err
				}
				defer f.Close()
				src, size = f, fi.Size()
			}
			cmp := lfi // a new mode is a change whatever the content
			if lfi != nil && lfi.Mode().Perm() != fs.FileMode(h.Mode).Perm() {
				cmp = nil
			}
			changed, err := writeIfChanged(src, size, cmp, lp, upper, name, lower)
			if err != nil {
				return n, err
			}
			if !changed {
				break
			}
			if err := os.Chmod(up, fs.FileMode(h.Mode).Perm()); err != nil {
				return n, err
			}
			os.Chtimes(up, time.Now(), h.ModTime)
			n++
		default:
			// Devices, fifos and sockets the command made are not kept.
			continue
		}
		seen[name] = e
	}
	// What the lower directory holds and the pod no longer does is deleted.
	err := filepath.WalkDir(lower, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			if p == lower {
				return err
			}
			return nil
		}
		if p == lower {
			return nil
		}
		rel, err := filepath.Rel(lower, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		parent, ok := seen[path.Dir(name)]
		if !ok || !parent.dir || parent.fresh {
			return fs.SkipDir // hidden by what replaced the parent
		}
		if e, ok := seen[name]; ok {
			if !e.dir && de.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if err := prepare(upper, name, lower); err != nil {
			return err
		}
		if err := whiteout(filepath.Join(upper, filepath.FromSlash(name))); err != nil {
			return err
		}
		n++
		if de.IsDir() {
			return fs.SkipDir
		}
		return nil
	})
	return n, err
}

// prepare makes name's parent directories in upper, each with the mode of
// the lower directory it stands for, and refuses parents that are not
// plain directories there.
func prepare(upper, name, lower string) error {
	dir := path.Dir(name)
	if dir == "." {
		return nil
	}
	parts := strings.Split(dir, "/")
	for i := range parts {
		sub := strings.Join(parts[:i+1], "/")
		up := filepath.Join(upper, filepath.FromSlash(sub))
		fi, err := os.Lstat(up)
		switch {
		case err == nil && fi.IsDir():
			continue
		case err == nil:
			return fmt.Errorf("%s in the changeset is not a directory", sub)
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
		mode := fs.FileMode(0o755)
		if lfi, err := os.Stat(filepath.Join(lower, filepath.FromSlash(sub))); err == nil && lfi.IsDir() {
			mode = lfi.Mode().Perm()
		}
		if err := os.Mkdir(up, 0o700); err != nil {
			return err
		}
		if err := os.Chmod(up, mode); err != nil {
			return err
		}
	}
	return nil
}

// mkdirUpper makes directory name in upper with mode; a fresh one that
// replaces a non-directory needs nothing more from overlayfs.
func mkdirUpper(upper, name, lower string, mode fs.FileMode, fresh bool) error {
	if err := prepare(upper, name, lower); err != nil {
		return err
	}
	up := filepath.Join(upper, filepath.FromSlash(name))
	if err := os.Mkdir(up, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if fi, err := os.Lstat(up); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s in the changeset is not a directory", name)
	}
	return os.Chmod(up, mode)
}

// whiteout marks p deleted: overlayfs's character device 0/0 where this
// process may make one, else an empty file with the user.overlay.whiteout
// attribute (both are what internal/changeset reads).
func whiteout(p string) error {
	if err := unix.Mknod(p, unix.S_IFCHR, 0); err == nil {
		return nil
	}
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		return err
	}
	if err := unix.Lsetxattr(p, "user.overlay.whiteout", []byte("y"), 0); err != nil {
		os.Remove(p)
		return fmt.Errorf("marking %s deleted: %w", p, err)
	}
	return nil
}

// openRegularIn opens the regular file rel below root without following a
// symbolic link on the way or at the end (the workspace's original may
// hold links; the pod's tar only claimed their parents were directories).
func openRegularIn(root, rel string) (*os.File, fs.FileInfo, error) {
	f, err := untrusted.OpenFileBeneath(root, rel)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// writeIfChanged writes size bytes of src as name in upper, unless the
// lower file (lfi, at lp) holds the same bytes. Content is streamed, never
// held whole: a file the size of the lower one is copied to a temporary
// file beside upper while it is compared, and renamed into place only if
// it differs.
func writeIfChanged(src io.Reader, size int64, lfi fs.FileInfo, lp, upper, name, lower string) (bool, error) {
	up := filepath.Join(upper, filepath.FromSlash(name))
	create := func(p string) (*os.File, error) {
		return os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	}
	copyN := func(f *os.File) error {
		if _, err := io.CopyN(f, src, size); err != nil {
			f.Close()
			return fmt.Errorf("reading the pod's %s: %w", name, err)
		}
		return f.Close()
	}
	if lfi == nil || !lfi.Mode().IsRegular() || lfi.Size() != size {
		if err := prepare(upper, name, lower); err != nil {
			return false, err
		}
		f, err := create(up)
		if err != nil {
			return false, err
		}
		return true, copyN(f)
	}
	tmp, err := os.CreateTemp(filepath.Dir(upper), ".pinfold-kube-")
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp.Name())
	lf, _, err := openRegularIn(lower, filepath.FromSlash(name))
	var same bool
	if err == nil {
		same, err = copyCompare(tmp, src, lf, size)
		lf.Close()
	} else {
		_, err = io.CopyN(tmp, src, size)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("reading the pod's %s: %w", name, err)
	}
	if same {
		return false, nil
	}
	if err := prepare(upper, name, lower); err != nil {
		return false, err
	}
	if _, err := os.Lstat(up); err == nil {
		return false, fmt.Errorf("%s is in the changeset already", name)
	}
	return true, os.Rename(tmp.Name(), up)
}

// copyCompare copies size bytes of src to w and reports whether they
// equal the next size bytes of old.
func copyCompare(w io.Writer, src, old io.Reader, size int64) (bool, error) {
	same := true
	a, b := make([]byte, 64<<10), make([]byte, 64<<10)
	for size > 0 {
		k := int64(len(a))
		if size < k {
			k = size
		}
		if _, err := io.ReadFull(src, a[:k]); err != nil {
			return false, err
		}
		if _, err := w.Write(a[:k]); err != nil {
			return false, err
		}
		if same {
			if _, err := io.ReadFull(old, b[:k]); err != nil || !bytes.Equal(a[:k], b[:k]) {
				same = false
			}
		}
		size -= k
	}
	return same, nil
}
