package packer

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/internal/pack"
	"github.com/pinfold/pinfold/internal/untrusted"
)

// Level is the gzip level of every layer: fixed, since it is part of the
// bytes (and so of the digest). klauspost's gzip at its fastest level is
// several times faster than the standard library's default and its output
// is fixed for a given version of the library, which go.sum pins. Layers
// are compressed in blocks on all CPUs (parallelGzip).
const Level = gzip.BestSpeed

// shiftedIDs is how many ids a sandbox maps (tarentry.ShiftedIDs).
const shiftedIDs = 65536

// fileLayer is a gzip layer written to a file, its digests computed while
// it was written.
type fileLayer struct {
	path           string
	digest, diffID v1.Hash
	size           int64
}

var _ v1.Layer = (*fileLayer)(nil)

func (l *fileLayer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *fileLayer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *fileLayer) Size() (int64, error)                { return l.size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }
func (l *fileLayer) Compressed() (io.ReadCloser, error)  { return os.Open(l.path) }
func (l *fileLayer) Uncompressed() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, err
	}
	z, err := gzip.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		f.Close()
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{z, f}, nil
}

// counter counts and hashes what passes through it.
type counter struct {
	w io.Writer
	h hash.Hash
	n int64
}

func (c *counter) Write(p []byte) (int, error) {
	c.h.Write(p)
	c.n += int64(len(p))
	if c.w == nil {
		return len(p), nil
	}
	return c.w.Write(p)
}

func sum(h hash.Hash) v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
}

// writeLayer packs l into a gzip tar at file.
func writeLayer(ctx context.Context, l pack.Layer, epoch time.Time, file string) (*fileLayer, error) {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	comp := &counter{w: bw, h: sha256.New()}
	z := newParallelGzip(comp)
	raw := &counter{w: z, h: sha256.New()}
	tw := tar.NewWriter(raw)
	if err := writeTree(ctx, tw, l, epoch); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := z.Close(); err != nil {
		return nil, err
	}
	if err := bw.Flush(); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return &fileLayer{path: file, digest: sum(comp.h), diffID: sum(raw.h), size: comp.n}, nil
}

// entries lists the paths of l below its directory in tar order: each
// directory before what it holds, names in byte order within a directory.
func entries(l pack.Layer) ([]string, error) {
	if l.Files != nil {
		set := map[string]bool{}
		for _, f := range l.Files {
			f = path.Clean(filepath.ToSlash(f))
			if f == "." || f == ".." || strings.HasPrefix(f, "../") || path.IsAbs(f) {
				return nil, fmt.Errorf("file %q is not below the directory", f)
			}
			for p := f; p != "."; p = path.Dir(p) {
				set[p] = true
			}
		}
		var out []string
		for p := range set {
			if top, _, _ := strings.Cut(p, "/"); slices.Contains(l.Skip, top) {
				continue
			}
			out = append(out, p)
		}
		slices.SortFunc(out, compareParts)
		return out, nil
	}
	var out []string
	var walk func(rel string) error
	walk = func(rel string) error {
		if rel == "" && l.Overlay {
			// The image's top-level directories: Dir/<top>/upper.
			tops, err := os.ReadDir(l.Dir)
			if err != nil {
				return err
			}
			for _, t := range tops {
				if st, err := os.Lstat(filepath.Join(l.Dir, t.Name(), "upper")); err == nil && st.IsDir() {
					out = append(out, t.Name())
					if err := walk(t.Name()); err != nil {
						return err
					}
				}
			}
			return nil
		}
		d, err := os.Open(srcPath(l, rel))
		if err != nil {
			return err
		}
		names, err := d.Readdirnames(-1)
		d.Close()
		if err != nil {
			return err
		}
		slices.Sort(names)
		for _, n := range names {
			p := n
			if rel != "" {
				p = rel + "/" + n
			} else if slices.Contains(l.Skip, n) {
				continue
			}
			out = append(out, p)
			fi, err := os.Lstat(srcPath(l, p))
			if err != nil {
				return err
			}
			if fi.IsDir() {
				if err := walk(p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return out, walk("")
}

// compareParts orders paths component by component, as a walk does.
func compareParts(a, b string) int {
	return slices.Compare(strings.Split(a, "/"), strings.Split(b, "/"))
}

// writeTree writes the entries of l.
func writeTree(ctx context.Context, tw *tar.Writer, l pack.Layer, epoch time.Time) error {
	list, err := entries(l)
	if err != nil {
		return err
	}
	prefix := strings.Trim(path.Clean("/"+filepath.ToSlash(l.Prefix)), "/")
	if prefix != "" {
		if err := writeParents(tw, l, prefix, epoch); err != nil {
			return err
		}
		list = append([]string{""}, list...) // then the directory itself
	}
	links := map[[2]uint64]string{}
	// Paths that are not directories: nothing is read through them (a
	// listed "a/b" where "a" is a symbolic link would read outside Dir).
	leaves := map[string]bool{}
	buf := make([]byte, 1<<20)
	for _, rel := range list {
		if err := ctx.Err(); err != nil {
			return err
		}
		if underLeaf(rel, leaves) {
			continue
		}
		src := srcPath(l, rel)
		fi, err := os.Lstat(src)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			leaves[rel] = true
		}
		name := path.Join(prefix, rel)
		hdr, err := header(fi, name, l.UIDShift, epoch)
		if err != nil {
			return err
		}
		if hdr != nil && l.EpochTimes {
			hdr.ModTime = epoch.UTC()
		}
		if hdr != nil && l.GitModes {
			hdr.Mode = gitMode(hdr)
		}
		whiteout := l.Overlay && isWhiteout(fi)
		if whiteout {
			dir, base := path.Split(name)
			hdr = &tar.Header{Typeflag: tar.TypeReg, Name: dir + ".wh." + base, ModTime: epoch}
		}
		if hdr == nil {
			continue // devices, fifos, sockets: a sandbox makes its own /dev
		}
		if hdr.Typeflag == tar.TypeSymlink {
			if hdr.Linkname, err = os.Readlink(src); err != nil {
				return err
			}
		}
		st, _ := fi.Sys().(*syscall.Stat_t)
		// overlayfs makes whiteouts as links to one shared inode: each is
		// its own entry.
		if hdr.Typeflag == tar.TypeReg && st != nil && st.Nlink > 1 && !whiteout && !l.GitModes {
			key := [2]uint64{st.Dev, st.Ino}
			if first, ok := links[key]; ok {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
			} else {
				links[key] = name
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
		if l.Overlay && hdr.Typeflag == tar.TypeDir && isOpaque(src) {
			// What the lower layers have here is hidden.
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name + "/.wh..wh..opq", ModTime: epoch}); err != nil {
				return err
			}
		}
		if hdr.Typeflag == tar.TypeReg && hdr.Size > 0 {
			if err := copyContent(tw, l, rel, hdr.Size, buf); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeParents writes the directories above prefix (a/b for a/b/c): as
// the tree below (l.Parents) has them, else plain.
func writeParents(tw *tar.Writer, l pack.Layer, prefix string, epoch time.Time) error {
	parts := strings.Split(prefix, "/")
	below := l.Parents != "" // the tree below still has the path
	for i := 1; i < len(parts); i++ {
		name := strings.Join(parts[:i], "/")
		hdr := &tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755, ModTime: epoch}
		if below {
			// As the tree below has it, when it has it as a
			// directory; after a symbolic link or a missing
			// component, never (a link would lead out of the tree,
			// to the packing host's directories).
			fi, err := os.Lstat(filepath.Join(l.Parents, filepath.FromSlash(name)))
			if below = err == nil && fi.IsDir(); below {
				if h, err := header(fi, name, l.ParentsShift, epoch); err == nil && h != nil {
					hdr = h
				}
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
	}
	return nil
}

// copyContent copies the size bytes of the regular file rel into tw. A
// workspace a sandbox (an rw session) may still write: no link on the
// way or at the end is followed, no FIFO opened, and a file whose size
// changed is refused.
func copyContent(tw *tar.Writer, l pack.Layer, rel string, size int64, buf []byte) error {
	root, below := srcRoot(l, rel)
	f, err := untrusted.OpenFileBeneath(root, below)
	if err != nil {
		return err
	}
	n, err := io.CopyBuffer(tw, io.LimitReader(f, size), buf)
	f.Close()
	if err != nil {
		return err
	}
	if n != size {
		return fmt.Errorf("%s changed while it was packed", srcPath(l, rel))
	}
	return nil
}

// gitMode is the mode git records for what hdr describes.
func gitMode(hdr *tar.Header) int64 {
	switch {
	case hdr.Typeflag == tar.TypeDir:
		return 0o755
	case hdr.Typeflag == tar.TypeSymlink:
		return 0o777
	case hdr.Mode&0o111 != 0:
		return 0o755
	}
	return 0o644
}

// header is the tar header of fi at name, or nil for what is not packed.
func header(fi fs.FileInfo, name string, shift uint32, epoch time.Time) (*tar.Header, error) {
	m := fi.Mode()
	hdr := &tar.Header{Name: name, Mode: int64(m.Perm())}
	if m&fs.ModeSetuid != 0 {
		hdr.Mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		hdr.Mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		hdr.Mode |= 0o1000
	}
	switch {
	case m.IsRegular():
		hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
	case m.IsDir():
		hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
	case m&fs.ModeSymlink != 0:
		hdr.Typeflag = tar.TypeSymlink
	default:
		return nil, nil
	}
	t := fi.ModTime().Truncate(time.Second)
	if t.After(epoch) {
		t = epoch
	}
	hdr.ModTime = t.UTC()
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		hdr.Uid, hdr.Gid = unshift(st.Uid, shift), unshift(st.Gid, shift)
	}
	return hdr, nil
}

// unshift maps a host id back to the id it stands for in the sandbox.
func unshift(id, shift uint32) int {
	if shift != 0 && id >= shift && id-shift < shiftedIDs {
		return int(id - shift)
	}
	return 0
}

// underLeaf reports whether a parent of rel is in leaves.
func underLeaf(rel string, leaves map[string]bool) bool {
	for p := path.Dir(rel); p != "." && p != "/"; p = path.Dir(p) {
		if leaves[p] {
			return true
		}
	}
	return false
}

// srcPath is where the image path rel of l is on the host.
// srcRoot is srcPath as a directory and a path below it.
func srcRoot(l pack.Layer, rel string) (string, string) {
	if l.Overlay && rel != "" {
		top, rest, _ := strings.Cut(rel, "/")
		if rest == "" {
			return filepath.Join(l.Dir, top), "upper"
		}
		return filepath.Join(l.Dir, top, "upper"), rest
	}
	if rel == "" {
		return filepath.Dir(l.Dir), filepath.Base(l.Dir)
	}
	return l.Dir, rel
}

func srcPath(l pack.Layer, rel string) string {
	if l.Overlay && rel != "" {
		top, rest, _ := strings.Cut(rel, "/")
		return filepath.Join(l.Dir, top, "upper", rest)
	}
	return filepath.Join(l.Dir, rel)
}

// isWhiteout reports an overlayfs whiteout: a 0:0 character device.
func isWhiteout(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && fi.Mode()&fs.ModeCharDevice != 0 && st.Rdev == 0
}

// isOpaque reports an overlayfs opaque directory (as the store marks
// them: user.overlay.opaque in a user namespace, trusted. as root).
func isOpaque(dir string) bool {
	var b [4]byte
	for _, name := range []string{"user.overlay.opaque", "trusted.overlay.opaque"} {
		if n, err := unix.Lgetxattr(dir, name, b[:]); err == nil && n == 1 && b[0] == 'y' {
			return true
		}
	}
	return false
}
