package changeset

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// OCI whiteout names.
const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
)

// LayerMediaType is the media type of what Export writes.
const LayerMediaType = "application/vnd.oci.image.layer.v1.tar"

// xnode is one path of the layer being exported.
type xnode struct {
	children  map[string]*xnode
	st        *Stat  // nil for a parent the layer only implies
	src       string // the file to read (upper version) or stat (implied parents)
	root, rel string // src as an upper directory and a path below it
	opaque    bool
	whiteouts []string
}

func (n *xnode) child(name string) *xnode {
	if n.children == nil {
		n.children = make(map[string]*xnode)
	}
	c := n.children[name]
	if c == nil {
		c = &xnode{}
		n.children[name] = c
	}
	return c
}

// Export writes the changes as an OCI image layer: an uncompressed tar
// ([LayerMediaType]) whose paths are each root's Lower made relative to
// "/" followed by the entry's path, so that the layer applies on a root
// file system. A deletion is an empty file ".wh.<name>"; a directory that
// replaced the original is the directory, its "<dir>/.wh..wh..opq" marker
// and all its contents. In each directory the opaque marker and the
// whiteouts come before the other names; parents come before children;
// owners are 0:0; times are kept to the second; hard links among the
// exported files stay links. The same changeset gives the same bytes.
func Export(w io.Writer, roots []Root, entries []Entry) error {
	top := &xnode{}
	index := make(map[string]Entry, len(entries))
	for _, e := range entries {
		index[FingerprintKey(e.Root, e.Path)] = e
	}
	// A deletion below a path that is deleted, opaque or no longer a
	// directory is implied by that path.
	implied := func(e *Entry) bool {
		for p := e.Path; ; {
			d, _ := splitPath(p)
			if d == "" {
				return false
			}
			if pe, ok := index[FingerprintKey(e.Root, d)]; ok && (pe.New == nil || !pe.New.Mode.IsDir() || pe.Opaque || pe.TypeChanged()) {
				return true
			}
			p = d
		}
	}
	for ri, r := range roots {
		base := strings.TrimPrefix(path.Clean("/"+filepath.ToSlash(r.Lower)), "/")
		rn := top
		if base != "" {
			at := ""
			for _, c := range strings.Split(base, "/") {
				at += "/" + c
				rn = rn.child(c)
				if rn.st == nil {
					rn.src = at
				}
			}
		}
		for i := range entries {
			e := &entries[i]
			if e.Root != ri {
				continue
			}
			if !validRel(e.Path) {
				return fmt.Errorf("exporting %q: %w: bad path", e.Path, ErrUnsafe)
			}
			if e.New == nil && implied(e) {
				continue
			}
			dir, name := splitPath(e.Path)
			parent := rn
			if dir != "" {
				at := ""
				for _, c := range strings.Split(dir, "/") {
					at = join(at, c)
					parent = parent.child(c)
					if parent.st == nil && parent.src == "" {
						// A parent the layer implies.
						parent.src, parent.root, parent.rel = join(r.Lower, at), r.Lower, at
					}
				}
			}
			if e.New == nil {
				parent.whiteouts = append(parent.whiteouts, name)
				continue
			}
			n := parent.child(name)
			n.st, n.src, n.root, n.rel = e.New, join(r.Upper, e.Path), r.Upper, e.Path
			if e.Opaque {
				n.opaque = true
				if err := addUpperTree(n, r.Upper, e.Path); err != nil {
					return err
				}
			}
		}
	}
	x := &exporter{tw: tar.NewWriter(w), links: make(map[[2]uint64]string)}
	if err := x.children(top, ""); err != nil {
		return err
	}
	return x.tw.Close()
}

// addUpperTree adds everything below the directory rel of the upper
// directory root to n.
func addUpperTree(n *xnode, root, rel string) error {
	names, sts, err := readDirIn(root, rel)
	if err != nil {
		return fmt.Errorf("exporting %s: %w", join(root, rel), err)
	}
	for i, name := range names {
		p, st := join(join(root, rel), name), sts[i]
		if st == nil || upperWhiteout(p, st) {
			continue
		}
		c := n.child(name)
		if c.st == nil {
			c.st, c.src, c.root, c.rel = st, p, root, join(rel, name)
		}
		if st.Mode.IsDir() {
			if err := addUpperTree(c, root, join(rel, name)); err != nil {
				return err
			}
		}
	}
	return nil
}

type exporter struct {
	tw    *tar.Writer
	links map[[2]uint64]string // upper inode -> first tar path
}

// epoch is the time of entries that have none of their own.
func epoch() time.Time { return time.Unix(0, 0) }

func (x *exporter) children(n *xnode, at string) error {
	emptyFile := func(name string) error {
		return x.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, ModTime: epoch()})
	}
	if n.opaque {
		if err := emptyFile(at + opaqueMarker); err != nil {
			return err
		}
	}
	slices.Sort(n.whiteouts)
	for _, w := range slices.Compact(n.whiteouts) {
		if _, ok := n.children[w]; ok {
			continue // replaced: the new entry wins
		}
		if err := emptyFile(at + whiteoutPrefix + w); err != nil {
			return err
		}
	}
	names := make([]string, 0, len(n.children))
	for k := range n.children {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, name := range names {
		c := n.children[name]
		if err := x.node(c, at+name); err != nil {
			return err
		}
	}
	return nil
}

func (x *exporter) node(n *xnode, name string) error {
	st := n.st
	if st == nil {
		// A parent the layer implies: a directory with the original's
		// mode, found below the root without following a link (the
		// default then), or one of the root's own parents; and the epoch
		// for its time: the original's changes whenever something is
		// made in it, and the same changeset must give the same bytes.
		mode := fs.FileMode(0o755)
		if n.root != "" {
			if o, err := statIn(n.root, n.rel); err == nil && o != nil && o.Mode.IsDir() {
				mode = o.Mode
			}
		} else if fi, err := os.Lstat(n.src); err == nil && fi.IsDir() {
			mode = fi.Mode()
		}
		st = &Stat{Mode: mode | fs.ModeDir, ModTime: epoch()}
	}
	h := &tar.Header{
		Name: name,
		// As Apply: no set-id bits (a container engine applying the layer
		// as root would plant set-id programs).
		Mode:    tarMode(AppliedMode(st.Mode)),
		ModTime: st.ModTime.Truncate(time.Second),
	}
	if h.ModTime.Before(epoch()) {
		h.ModTime = epoch()
	}
	var body *os.File
	m := st.Mode
	switch {
	case m.IsDir():
		h.Typeflag, h.Name = tar.TypeDir, name+"/"
	case m&fs.ModeSymlink != 0:
		h.Typeflag, h.Linkname = tar.TypeSymlink, st.Link
	case m.IsRegular():
		k := [2]uint64{st.Dev, st.Ino}
		if first, ok := x.links[k]; ok && st.Nlink > 1 {
			h.Typeflag, h.Linkname = tar.TypeLink, first
			break
		}
		f, err := openFileIn(n.root, n.rel)
		if err != nil {
			return fmt.Errorf("exporting %s: %w", n.src, err)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("exporting %s: no longer a regular file", n.src)
		}
		h.Typeflag, h.Size, body = tar.TypeReg, fi.Size(), f
		if st.Nlink > 1 {
			x.links[k] = name
		}
	case m&fs.ModeNamedPipe != 0:
		h.Typeflag = tar.TypeFifo
	case m&fs.ModeDevice != 0:
		h.Typeflag = tar.TypeBlock
		if m&fs.ModeCharDevice != 0 {
			h.Typeflag = tar.TypeChar
		}
		h.Devmajor, h.Devminor = int64(devMajor(st.Rdev)), int64(devMinor(st.Rdev))
	default:
		return nil // a socket: tar has no place for it
	}
	if err := x.tw.WriteHeader(h); err != nil {
		return fmt.Errorf("exporting %s: %w", name, err)
	}
	if body != nil {
		if _, err := io.CopyN(x.tw, body, h.Size); err != nil {
			return fmt.Errorf("exporting %s: %w", n.src, err)
		}
	}
	if m.IsDir() {
		return x.children(n, name+"/")
	}
	return nil
}

func tarMode(m fs.FileMode) int64 {
	p := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		p |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		p |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		p |= 0o1000
	}
	return p
}

func devMajor(dev uint64) uint32 {
	return uint32((dev>>8)&0xfff | (dev>>32)&^0xfff)
}

func devMinor(dev uint64) uint32 {
	return uint32(dev&0xff | (dev>>12)&^0xff)
}

// LayerEntry is one entry of a layer read back by ReadLayer.
type LayerEntry struct {
	Path     string      // relative and clean, "/"-separated; "." for the layer's root
	Type     byte        // the tar type flag (tar.TypeReg, TypeDir, TypeSymlink, TypeLink, ...); 0 for whiteouts
	Mode     fs.FileMode // permission bits (with setuid, setgid, sticky) and the type
	Size     int64
	Link     string // a symlink's target, or the path a hard link points to
	ModTime  time.Time
	UID, GID int
	Whiteout bool   // Path is deleted
	Opaque   bool   // Path, a directory, hides the lower layers' contents
	Digest   string // "sha256:<hex>" of a regular file's content
}

// Limits of ReadLayer.
const (
	maxLayerEntries = 1 << 20
	maxLayerPath    = 4096
)

// ErrBadLayer: a layer ReadLayer refuses.
var ErrBadLayer = errors.New("bad layer")

// ReadLayer reads an uncompressed OCI layer tar. Whiteouts come back as
// entries with Whiteout or Opaque set. Absolute paths, paths with "..",
// hard links out of the layer and more than a million entries are
// errors.
func ReadLayer(r io.Reader) ([]LayerEntry, error) {
	tr := tar.NewReader(r)
	var out []LayerEntry
	h256 := sha256.New()
	var sum [sha256.Size]byte
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadLayer, err)
		}
		if len(out) >= maxLayerEntries {
			return nil, fmt.Errorf("%w: more than %d entries", ErrBadLayer, maxLayerEntries)
		}
		p, err := layerPath(h.Name)
		if err != nil {
			return nil, err
		}
		e := LayerEntry{Path: p, Type: h.Typeflag, Size: h.Size, ModTime: h.ModTime, UID: h.Uid, GID: h.Gid}
		e.Mode = fs.FileMode(h.Mode & 0o777)
		if h.Mode&0o4000 != 0 {
			e.Mode |= fs.ModeSetuid
		}
		if h.Mode&0o2000 != 0 {
			e.Mode |= fs.ModeSetgid
		}
		if h.Mode&0o1000 != 0 {
			e.Mode |= fs.ModeSticky
		}
		dir, base := path.Split(p)
		dir = strings.TrimSuffix(dir, "/")
		if dir == "" {
			dir = "."
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeRegA, tar.TypeGNUSparse:
			e.Type = tar.TypeReg
			switch {
			case base == opaqueMarker:
				e = LayerEntry{Path: dir, Opaque: true}
			case strings.HasPrefix(base, whiteoutPrefix):
				victim := strings.TrimPrefix(base, whiteoutPrefix)
				if victim == "" || victim == "." || victim == ".." {
					return nil, fmt.Errorf("%w: bad whiteout %q", ErrBadLayer, h.Name)
				}
				e = LayerEntry{Path: path.Join(dir, victim), Whiteout: true}
			default:
				h256.Reset()
				n, err := io.Copy(h256, tr)
				if err != nil {
					return nil, fmt.Errorf("%w: %s: %v", ErrBadLayer, p, err)
				}
				e.Size = n
				e.Digest = "sha256:" + hex.EncodeToString(h256.Sum(sum[:0]))
			}
		case tar.TypeDir:
			e.Mode |= fs.ModeDir
			if p == "." {
				continue
			}
		case tar.TypeSymlink:
			e.Mode |= fs.ModeSymlink
			e.Link = h.Linkname
		case tar.TypeLink:
			l, err := layerPath(h.Linkname)
			if err != nil || l == "." {
				return nil, fmt.Errorf("%w: hard link %q to %q", ErrBadLayer, h.Name, h.Linkname)
			}
			e.Link = l
		case tar.TypeChar:
			e.Mode |= fs.ModeDevice | fs.ModeCharDevice
		case tar.TypeBlock:
			e.Mode |= fs.ModeDevice
		case tar.TypeFifo:
			e.Mode |= fs.ModeNamedPipe
		case tar.TypeXGlobalHeader:
			continue
		default:
			return nil, fmt.Errorf("%w: %q has unknown type %q", ErrBadLayer, h.Name, h.Typeflag)
		}
		if e.Path == "." && !e.Opaque {
			return nil, fmt.Errorf("%w: entry %q names the layer's root", ErrBadLayer, h.Name)
		}
		out = append(out, e)
	}
}

// layerPath cleans a name from a layer, refusing what would leave it.
func layerPath(name string) (string, error) {
	if name == "" || len(name) > maxLayerPath || strings.IndexByte(name, 0) >= 0 {
		return "", fmt.Errorf("%w: bad name %q", ErrBadLayer, name)
	}
	if name[0] == '/' {
		return "", fmt.Errorf("%w: absolute name %q", ErrBadLayer, name)
	}
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return "", fmt.Errorf("%w: name %q leaves the layer", ErrBadLayer, name)
		}
	}
	return path.Clean(name), nil
}
