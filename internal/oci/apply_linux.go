package oci

import (
	"archive/tar"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/pinfold/pinfold/internal/tarentry"
	"golang.org/x/sys/unix"
)

// OCI whiteout names.
const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
)

// limits bound one Apply and say how to set owners and modes.
type limits struct {
	maxBytes, maxEntries int64
	chown, keepSUID      bool
	shift                uint32
}

func (o ApplyOptions) limits() (limits, error) {
	switch {
	case o.UIDShift != 0 && !o.Chown:
		return limits{}, errors.New("UIDShift needs Chown")
	case o.KeepSUID && (!o.Chown || o.UIDShift == 0):
		return limits{}, errors.New("KeepSUID needs Chown and a non-zero UIDShift")
	}
	l := limits{maxBytes: o.MaxBytes, maxEntries: o.MaxEntries, chown: o.Chown, keepSUID: o.KeepSUID, shift: o.UIDShift}
	if l.maxBytes <= 0 {
		l.maxBytes = defaultMaxBytes
	}
	if l.maxEntries <= 0 {
		l.maxEntries = defaultMaxEntries
	}
	return l, nil
}

// streamMax bounds the decompressed tar streams of all layers together:
// file data plus generous room for headers, long names and padding, so that
// a stream of headers alone cannot run for ever.
func (l limits) streamMax() int64 {
	const perEntry = 8 << 10
	m := l.maxBytes
	if extra := min(l.maxEntries, 1<<40)*perEntry + 1<<20; m < 1<<62-extra {
		m += extra
	} else {
		m = 1 << 62
	}
	return m
}

// Reasons an entry is refused.
var (
	errEmptyName      = &reason{"entry name is empty", unsafeLayer}
	errNameNUL        = &reason{"entry name contains a NUL byte", unsafeLayer}
	errNameTooLong    = &reason{"entry name is longer than 4096 bytes", unsafeLayer}
	errNameEscapes    = &reason{"entry name escapes the root with ..", unsafeLayer}
	errSymlinkInPath  = &reason{"path traverses a symlink", unsafeLayer}
	errFileInPath     = &reason{"path goes through a file that is not a directory", unsafeLayer}
	errOutsideRoot    = &reason{"path leaves the root", unsafeLayer}
	errLinkTarget     = &reason{"symlink target is empty, too long or contains a NUL byte", unsafeLayer}
	errHardlinkTarget = &reason{"hard link target is not a regular file in the root", unsafeLayer}
	errWhiteoutName   = &reason{"whiteout names no file", unsafeLayer}
	errNoOpenat2      = &reason{"openat2 is not available; pinfold needs Linux 5.6 or later", unsupported}
)

// Apply unpacks img's layers in order into root, an existing directory
// (normally empty), with OCI whiteouts: ".wh.NAME" removes NAME as lower
// layers left it, and ".wh..wh..opq" removes everything lower layers put in
// its directory; neither touches what the same layer adds, whatever the
// order of its entries. A non-directory entry replaces what lower layers
// had at its path, a directory included; a directory merges with one.
// Every layer is read to its end, so that its digests are checked (see
// [Layer.Open]). On error root holds part of the image; the caller removes
// it.
//
// Every layer is hostile. Apply refuses, with an *EntryError wrapping
// ErrUnsafeLayer:
//   - names with a NUL byte, longer than 4096 bytes, empty, or whose ".."
//     would climb above the root (a leading "/" or "./" is read as relative
//     to the root), and whiteouts of "", "." or "..";
//   - entries whose path goes through a symlink or a non-directory: every
//     lookup is an openat2 below the root with RESOLVE_BENEATH,
//     RESOLVE_NO_SYMLINKS, RESOLVE_NO_MAGICLINKS and RESOLVE_NO_XDEV, and
//     nothing is created, removed or linked by following a symlink (image
//     builders record real paths, so real layers never need one);
//   - hard links whose target is not a regular file below the root (an
//     absolute target is read relative to the root);
//   - owner ids out of range, and entry types it does not know.
//
// Device nodes and fifos are left out and counted; the sandbox makes its
// own /dev. Setuid and setgid bits are dropped unless opt.KeepSUID, file
// sticky bits and extended attributes always; symlink targets are kept
// verbatim (they resolve inside the sandbox, never on the host). Apply
// stops with ErrLimit at opt.MaxBytes or opt.MaxEntries, counted over all
// layers.
func Apply(ctx context.Context, img *Image, root string, opt ApplyOptions) (ApplyStats, error) {
	lim, err := opt.limits()
	if err != nil {
		return ApplyStats{}, fmt.Errorf("applying image %s: %w", img.Source, err)
	}
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return ApplyStats{}, fmt.Errorf("applying image %s: %w", img.Source, &fs.PathError{Op: "open", Path: root, Err: err})
	}
	x := &applier{
		root:     fd,
		rootPath: root,
		lim:      lim,
		dirs:     map[string]*dirMeta{"": {mode: 0o755}},
		cacheFd:  -1,
	}
	defer x.close()
	if lim.chown {
		if err := unix.Fchown(fd, int(lim.shift), int(lim.shift)); err != nil {
			return ApplyStats{}, fmt.Errorf("applying image %s: %w", img.Source, &fs.PathError{Op: "chown", Path: root, Err: err})
		}
	}
	for i, l := range img.Layers {
		if err := x.layer(ctx, i+1, l); err != nil {
			return x.stats, fmt.Errorf("applying image %s: %w", img.Source, err)
		}
		x.stats.Layers++
	}
	if err := x.finish(); err != nil {
		return x.stats, fmt.Errorf("applying image %s: %w", img.Source, err)
	}
	return x.stats, nil
}

// dirMeta is what a directory gets once all layers are in place: until
// then every directory is 0700, so that later layers can write and remove
// in it whatever its final mode.
type dirMeta struct {
	mode         uint32
	atime, mtime time.Time
	explicit     bool // listed in a layer (others were made for their children)
}

type applier struct {
	root     int // the root, opened
	rootPath string
	lim      limits
	stats    ApplyStats
	made     int64 // directories made for unlisted parents
	streamed int64 // bytes of tar stream read over all layers
	pruned   int64 // paths a whiteout looked at and kept

	dirs map[string]*dirMeta // directories the layers made, by clean name; "" is the root

	// What the current layer put in place, by clean name, with the
	// ancestors of each; true for a directory that layer created anew
	// (nothing of a lower layer can be below it). Whiteouts leave these
	// alone.
	seen map[string]bool

	layerN      int
	layerDigest string

	// The directory of the previous entry, which is usually the next
	// entry's too. Removing that directory or one above it drops it, since
	// a new directory of the same name is another inode.
	cacheDir string
	cacheFd  int

	buf []byte
}

func (x *applier) close() {
	x.dropCache()
	unix.Close(x.root)
}

func (x *applier) dropCache() {
	if x.cacheFd >= 0 {
		unix.Close(x.cacheFd)
		x.cacheFd, x.cacheDir = -1, ""
	}
}

// layer applies one layer and reads its stream to the end.
func (x *applier) layer(ctx context.Context, n int, l Layer) error {
	x.layerN, x.layerDigest = n, l.name()
	x.seen = make(map[string]bool)
	rc, err := l.Open()
	if err != nil {
		return fmt.Errorf("layer %d: %w", n, err)
	}
	defer rc.Close()
	in := &streamCounter{r: rc, x: x}
	tr := tar.NewReader(in)
	last := ""
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("layer %d: %w", n, err)
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		// ErrInsecurePath comes with a usable header; names get their
		// own, stricter checks below.
		if err != nil && (hdr == nil || !errors.Is(err, tar.ErrInsecurePath)) {
			return x.streamError(last, err)
		}
		x.stats.Entries++
		if err := x.count(0); err != nil {
			return x.entryError(hdr.Name, err)
		}
		if err := x.entry(hdr, tr); err != nil {
			return x.entryError(hdr.Name, err)
		}
		last = hdr.Name
	}
	// Read on past the end-of-archive marker: the digests are checked
	// at the end of the stream.
	if _, err := io.Copy(io.Discard, in); err != nil {
		return fmt.Errorf("layer %d (%s): reading after its end: %w", n, x.layerDigest, err)
	}
	return nil
}

func (x *applier) entryError(name string, err error) error {
	return &EntryError{Layer: x.layerN, Digest: x.layerDigest, Entry: name, Err: err}
}

func (x *applier) streamError(last string, err error) error {
	where := "at its start"
	if last != "" {
		where = "after entry " + tarentry.Quote(last)
	}
	if err == io.ErrUnexpectedEOF {
		return fmt.Errorf("layer %d (%s) is truncated %s: %w", x.layerN, x.layerDigest, where, err)
	}
	return fmt.Errorf("reading layer %d (%s) %s: %w", x.layerN, x.layerDigest, where, err)
}

// streamCounter caps the tar streams of all layers together.
type streamCounter struct {
	r io.Reader
	x *applier
}

func (s *streamCounter) Read(p []byte) (int, error) {
	max := s.x.lim.streamMax()
	if room := max - s.x.streamed + 1; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := s.r.Read(p)
	s.x.streamed += int64(n)
	if s.x.streamed > max {
		return n, &reason{fmt.Sprintf("layers expand beyond %d bytes of tar stream", max), limitExceeded}
	}
	return n, err
}

// count checks the limits after n more bytes. Directories made for
// unlisted parents count as entries, so that deep names cannot make more
// inodes than MaxEntries.
func (x *applier) count(n int64) error {
	if x.stats.Entries+x.made > x.lim.maxEntries {
		return &reason{fmt.Sprintf("layers have more than %d entries", x.lim.maxEntries), limitExceeded}
	}
	if n > x.lim.maxBytes-x.stats.Bytes {
		return &reason{fmt.Sprintf("layers expand beyond %d bytes", x.lim.maxBytes), limitExceeded}
	}
	x.stats.Bytes += n
	return nil
}

func (x *applier) entry(hdr *tar.Header, data io.Reader) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	name, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	dir, base := splitName(name)
	if strings.HasPrefix(base, whiteoutPrefix) {
		return x.whiteout(dir, base)
	}
	if name == "" && hdr.Typeflag != tar.TypeDir {
		return errEmptyName
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return x.mkdir(name, hdr)
	case tar.TypeReg, tar.TypeCont, tar.TypeGNUSparse:
		return x.writeFile(name, hdr, data)
	case tar.TypeSymlink:
		return x.symlink(name, hdr)
	case tar.TypeLink:
		return x.hardlink(name, hdr)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		// The sandbox builds its own /dev; no node is ever made.
		x.stats.Devices++
		return nil
	}
	return &reason{fmt.Sprintf("unsupported entry type %s", tarentry.Quote(string(hdr.Typeflag))), unsafeLayer}
}

// splitName splits a clean name into its directory ("" for the root) and
// last component.
func splitName(name string) (string, string) {
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return "", name
	}
	return name[:i], name[i+1:]
}

func joinName(dir, base string) string {
	if dir == "" {
		return base
	}
	return dir + "/" + base
}

// mark records that the current layer put name in place, and its
// ancestors; fresh is for a directory it created anew.
func (x *applier) mark(name string, fresh bool) {
	x.seen[name] = fresh
	for p := name; p != ""; {
		p, _ = splitName(p)
		if _, ok := x.seen[p]; ok {
			return
		}
		x.seen[p] = false
	}
}

// parent returns an fd of the directory that holds name, creating missing
// directories, and name's last component. The fd belongs to x.
func (x *applier) parent(name string) (int, string, error) {
	dir, base := splitName(name)
	if dir == "" {
		return x.root, name, nil
	}
	if x.cacheFd >= 0 && x.cacheDir == dir {
		return x.cacheFd, base, nil
	}
	fd, err := x.openDir(dir, true)
	if err != nil {
		return -1, "", err
	}
	x.dropCache()
	x.cacheFd, x.cacheDir = fd, dir
	return fd, base, nil
}

// openDir opens the directory dir (a clean name, not the root) as an O_PATH
// fd that the caller closes. With create, missing directories are made,
// as tar does for entries whose parents the layer does not list.
func (x *applier) openDir(dir string, create bool) (int, error) {
	const flags = unix.O_PATH | unix.O_DIRECTORY
	fd, err := tarentry.OpenBeneath(x.root, dir, flags)
	if err == nil {
		return fd, nil
	}
	if err != unix.ENOENT || !create {
		return -1, resolveError(dir, err)
	}
	cur := x.root
	for i, end := 0, 0; i < len(dir); i = end + 1 {
		end = len(dir)
		if j := strings.IndexByte(dir[i:], '/'); j >= 0 {
			end = i + j
		}
		comp, prefix := dir[i:end], dir[:end]
		next, err := tarentry.OpenBeneath(cur, comp, flags)
		if err == unix.ENOENT {
			x.made++
			if err := x.count(0); err != nil {
				if cur != x.root {
					unix.Close(cur)
				}
				return -1, err
			}
			err = unix.Mkdirat(cur, comp, 0o700)
			if err == nil {
				x.dirs[prefix] = &dirMeta{mode: 0o755}
				x.mark(prefix, true)
				if x.lim.chown {
					err = unix.Fchownat(cur, comp, int(x.lim.shift), int(x.lim.shift), unix.AT_SYMLINK_NOFOLLOW)
				}
			}
			if err == nil || err == unix.EEXIST {
				next, err = tarentry.OpenBeneath(cur, comp, flags)
			}
		}
		if cur != x.root {
			unix.Close(cur)
		}
		if err != nil {
			return -1, resolveError(prefix, err)
		}
		cur = next
	}
	return cur, nil
}

// removeAll removes base in dirfd and, if it is a directory, all it holds,
// never following a symlink. A missing base is not an error. dirfd stays
// valid. An entry replaces what lower layers or earlier entries left at its
// path this way, a directory with all it holds included, as docker does.
func (x *applier) removeAll(dirfd int, base, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT {
			return nil
		}
		return &fs.PathError{Op: "lstat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(dirfd, base, 0); err != nil {
			return &fs.PathError{Op: "unlink", Path: name, Err: err}
		}
		x.stats.Removed++
		return nil
	}
	if x.cacheFd >= 0 && (x.cacheDir == name || strings.HasPrefix(x.cacheDir, name+"/")) {
		x.dropCache()
	}
	names, err := readDirNames(dirfd, base, name)
	if err != nil {
		return err
	}
	if len(names) > 0 {
		fd, err := unix.Openat(dirfd, base, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &fs.PathError{Op: "open", Path: name, Err: err}
		}
		for _, n := range names {
			if err = x.removeAll(fd, n, name+"/"+n); err != nil {
				break
			}
		}
		unix.Close(fd)
		if err != nil {
			return err
		}
	}
	if err := unix.Unlinkat(dirfd, base, unix.AT_REMOVEDIR); err != nil {
		return &fs.PathError{Op: "rmdir", Path: name, Err: err}
	}
	delete(x.dirs, name)
	x.stats.Removed++
	return nil
}

// readDirNames lists the directory base in dirfd ("." for dirfd itself).
func readDirNames(dirfd int, base, name string) ([]string, error) {
	fd, err := unix.Openat(dirfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", name, err)
	}
	return names, nil
}

// whiteout applies the whiteout entry base in dir.
func (x *applier) whiteout(dir, base string) error {
	var target string
	switch {
	case base == opaqueMarker:
	case strings.HasPrefix(base, whiteoutPrefix+whiteoutPrefix):
		return nil // other aufs metadata, such as .wh..wh.plnk
	default:
		target = base[len(whiteoutPrefix):]
		if target == "" || target == "." || target == ".." {
			return errWhiteoutName
		}
	}
	x.stats.Whiteouts++
	dirfd := x.root
	if dir != "" {
		fd, err := tarentry.OpenBeneath(x.root, dir, unix.O_PATH|unix.O_DIRECTORY)
		if err == unix.ENOENT {
			return nil // nothing there to hide
		}
		if err != nil {
			return resolveError(dir, err)
		}
		defer unix.Close(fd)
		dirfd = fd
	}
	if target != "" {
		return x.prune(dirfd, target, joinName(dir, target))
	}
	// Opaque: everything in dir that this layer did not put there goes.
	names, err := readDirNames(dirfd, ".", cmpOr(dir, "."))
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := x.prune(dirfd, n, joinName(dir, n)); err != nil {
			return err
		}
	}
	return nil
}

// prune removes what lower layers left at name (base in dirfd): all of it
// if the current layer did not put name in place, else, for a directory
// it merged with a lower one, what lies below and is not its own.
func (x *applier) prune(dirfd int, base, name string) error {
	fresh, ok := x.seen[name]
	if !ok {
		return x.removeAll(dirfd, base, name)
	}
	if fresh {
		return nil
	}
	// Looking through what the layer itself made is bounded, so that
	// whiteouts placed after deep trees cannot make the work quadratic.
	if x.pruned++; x.pruned > 4*x.lim.maxEntries {
		return &reason{"whiteouts look through too many entries", limitExceeded}
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT {
			return nil
		}
		return &fs.PathError{Op: "lstat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil
	}
	names, err := readDirNames(dirfd, base, name)
	if err != nil {
		return err
	}
	fd, err := unix.Openat(dirfd, base, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	for _, n := range names {
		if err := x.prune(fd, n, name+"/"+n); err != nil {
			return err
		}
	}
	return nil
}

// owner maps the entry's ids to the ids stored on disk.
func (x *applier) owner(hdr *tar.Header) (int, int, error) {
	const maxID = 1<<32 - 2 // -1 means "unchanged" to chown
	uid, gid := int64(hdr.Uid)+int64(x.lim.shift), int64(hdr.Gid)+int64(x.lim.shift)
	if hdr.Uid < 0 || hdr.Gid < 0 || uid > maxID || gid > maxID {
		return 0, 0, &reason{fmt.Sprintf("owner %d:%d is out of range", hdr.Uid, hdr.Gid), unsafeLayer}
	}
	// Shifted, the ids land in the range the sandbox maps (ShiftedIDs
	// from the shift); an id past it would land on a host id the sandbox
	// does not own, perhaps another user's.
	if x.lim.shift != 0 && (hdr.Uid >= tarentry.ShiftedIDs || hdr.Gid >= tarentry.ShiftedIDs) {
		return 0, 0, &reason{fmt.Sprintf("owner %d:%d is outside the %d ids a sandbox maps", hdr.Uid, hdr.Gid, tarentry.ShiftedIDs), unsafeLayer}
	}
	return int(uid), int(gid), nil
}

// chownAt sets the owner of base in dirfd, never following a symlink.
func (x *applier) chownAt(dirfd int, base, name string, hdr *tar.Header) error {
	if !x.lim.chown {
		return nil
	}
	uid, gid, err := x.owner(hdr)
	if err != nil {
		return err
	}
	if err := unix.Fchownat(dirfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "chown", Path: name, Err: err}
	}
	return nil
}

func setTimes(dirfd int, base, name string, atime, mtime time.Time) error {
	if atime.IsZero() {
		atime = mtime
	}
	ts := []unix.Timespec{tarentry.Timespec(atime), tarentry.Timespec(mtime)}
	if err := unix.UtimesNanoAt(dirfd, base, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "utimes", Path: name, Err: err}
	}
	return nil
}

// fileMode keeps the permission bits of a file, setuid and setgid only
// with keepSUID, and never sticky.
func (l limits) fileMode(m int64) uint32 {
	if l.keepSUID {
		return uint32(m) & (0o777 | unix.S_ISUID | unix.S_ISGID)
	}
	return uint32(m) & 0o777
}

// dirMode keeps the permission bits and sticky bit of a directory, and
// setgid only with keepSUID.
func (l limits) dirMode(m int64) uint32 {
	if l.keepSUID {
		return uint32(m) & (0o777 | unix.S_ISVTX | unix.S_ISGID)
	}
	return uint32(m) & (0o777 | unix.S_ISVTX)
}

func (x *applier) mkdir(name string, hdr *tar.Header) error {
	meta := &dirMeta{mode: x.lim.dirMode(hdr.Mode), atime: hdr.AccessTime, mtime: hdr.ModTime, explicit: true}
	if name == "" {
		if x.lim.chown {
			uid, gid, err := x.owner(hdr)
			if err != nil {
				return err
			}
			if err := unix.Fchown(x.root, uid, gid); err != nil {
				return &fs.PathError{Op: "chown", Path: ".", Err: err}
			}
		}
		x.dirs[""] = meta
		return nil
	}
	dirfd, base, err := x.parent(name)
	if err != nil {
		return err
	}
	fresh := true
	err = unix.Mkdirat(dirfd, base, 0o700)
	if err == unix.EEXIST {
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &fs.PathError{Op: "lstat", Path: name, Err: err}
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			// Merged with a lower layer's, listed again, or made
			// earlier for a child.
			err, fresh = nil, x.seen[name]
		} else {
			if err := x.removeAll(dirfd, base, name); err != nil {
				return err
			}
			err = unix.Mkdirat(dirfd, base, 0o700)
		}
	}
	if err != nil {
		return &fs.PathError{Op: "mkdir", Path: name, Err: err}
	}
	if err := x.chownAt(dirfd, base, name, hdr); err != nil {
		return err
	}
	x.dirs[name] = meta
	x.mark(name, fresh)
	return nil
}

func (x *applier) writeFile(name string, hdr *tar.Header, data io.Reader) error {
	if hdr.Size < 0 {
		return &reason{"negative size", unsafeLayer}
	}
	// Checked and counted before anything is written. A sparse file
	// counts its full size.
	if err := x.count(hdr.Size); err != nil {
		return err
	}
	dirfd, base, err := x.parent(name)
	if err != nil {
		return err
	}
	const flags = unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(dirfd, base, flags, 0o600)
	if err == unix.EEXIST {
		if err := x.removeAll(dirfd, base, name); err != nil {
			return err
		}
		fd, err = unix.Openat(dirfd, base, flags, 0o600)
	}
	if err != nil {
		return &fs.PathError{Op: "create", Path: name, Err: err}
	}
	err = x.copyData(fd, name, data, hdr.Size)
	if err == nil && x.lim.chown {
		var uid, gid int
		if uid, gid, err = x.owner(hdr); err == nil {
			if err = unix.Fchown(fd, uid, gid); err != nil {
				err = &fs.PathError{Op: "chown", Path: name, Err: err}
			}
		}
	}
	if err == nil {
		// After the chown, which clears setuid and setgid.
		if err = unix.Fchmod(fd, x.lim.fileMode(hdr.Mode)); err != nil {
			err = &fs.PathError{Op: "chmod", Path: name, Err: err}
		}
	}
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = &fs.PathError{Op: "close", Path: name, Err: cerr}
	}
	if err != nil {
		return err
	}
	x.mark(name, true)
	return setTimes(dirfd, base, name, hdr.AccessTime, hdr.ModTime)
}

// copyData writes the entry's size bytes of data to fd.
func (x *applier) copyData(fd int, name string, data io.Reader, size int64) error {
	if x.buf == nil {
		x.buf = make([]byte, 128<<10)
	}
	err := tarentry.Copy(fd, name, data, size, x.buf)
	if err == io.ErrUnexpectedEOF {
		return fmt.Errorf("layer is truncated: %w", err)
	}
	return err
}

// symlink stores the target as it is: absolute targets are normal in a
// root filesystem and resolve inside the sandbox at run time. Nothing here
// ever follows it.
func (x *applier) symlink(name string, hdr *tar.Header) error {
	target := hdr.Linkname
	if target == "" || len(target) > tarentry.MaxName || strings.IndexByte(target, 0) >= 0 {
		return errLinkTarget
	}
	if err := x.count(int64(len(target))); err != nil {
		return err
	}
	dirfd, base, err := x.parent(name)
	if err != nil {
		return err
	}
	err = unix.Symlinkat(target, dirfd, base)
	if err == unix.EEXIST {
		if err := x.removeAll(dirfd, base, name); err != nil {
			return err
		}
		err = unix.Symlinkat(target, dirfd, base)
	}
	if err != nil {
		return &fs.PathError{Op: "symlink", Path: name, Err: err}
	}
	if err := x.chownAt(dirfd, base, name, hdr); err != nil {
		return err
	}
	x.mark(name, true)
	return setTimes(dirfd, base, name, hdr.AccessTime, hdr.ModTime)
}

// hardlink links name to a regular file below the root, from this layer or
// a lower one.
func (x *applier) hardlink(name string, hdr *tar.Header) error {
	target, err := cleanName(hdr.Linkname)
	if err != nil {
		return fmt.Errorf("hard link target %s: %w", tarentry.Quote(hdr.Linkname), err)
	}
	if target == "" || target == name {
		return errHardlinkTarget
	}
	tdir, tbase := x.root, target
	if d, b := splitName(target); d != "" {
		fd, err := x.openDir(d, false)
		if err == nil {
			defer unix.Close(fd)
		} else if errors.Is(err, fs.ErrNotExist) {
			return errHardlinkTarget
		} else {
			return fmt.Errorf("hard link target %s: %w", tarentry.Quote(hdr.Linkname), err)
		}
		tdir, tbase = fd, b
	}
	var st unix.Stat_t
	if err := unix.Fstatat(tdir, tbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return errHardlinkTarget
	}
	dirfd, base, err := x.parent(name)
	if err != nil {
		return err
	}
	// linkat without AT_SYMLINK_FOLLOW never dereferences the target.
	err = unix.Linkat(tdir, tbase, dirfd, base, 0)
	if err == unix.EEXIST {
		if err := x.removeAll(dirfd, base, name); err != nil {
			return err
		}
		err = unix.Linkat(tdir, tbase, dirfd, base, 0)
	}
	if err != nil {
		return &fs.PathError{Op: "link", Path: name, Err: err}
	}
	x.mark(name, true)
	return nil
}

// finish gives directories their final mode and times, deepest first, so
// that a read-only directory blocks nothing and setting one directory's
// times is not undone by work in it.
func (x *applier) finish() error {
	names := make([]string, 0, len(x.dirs))
	for n := range x.dirs {
		names = append(names, n)
	}
	depth := func(n string) int {
		if n == "" {
			return 0
		}
		return strings.Count(n, "/") + 1
	}
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(depth(b), depth(a)), strings.Compare(a, b))
	})
	for _, n := range names {
		m := x.dirs[n]
		if n == "" {
			if err := unix.Fchmod(x.root, m.mode); err != nil {
				return &fs.PathError{Op: "chmod", Path: x.rootPath, Err: err}
			}
			if m.explicit {
				if err := setTimes(unix.AT_FDCWD, x.rootPath, x.rootPath, m.atime, m.mtime); err != nil {
					return err
				}
			}
			continue
		}
		if err := x.finishDir(n, m); err != nil {
			return fmt.Errorf("directory %s: %w", tarentry.Quote(n), err)
		}
	}
	return nil
}

func (x *applier) finishDir(name string, m *dirMeta) error {
	dirfd, base, err := x.parent(name)
	if err != nil {
		return err
	}
	fd, err := tarentry.OpenBeneath(dirfd, base, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return resolveError(name, err)
	}
	err = unix.Fchmod(fd, m.mode)
	unix.Close(fd)
	if err != nil {
		return &fs.PathError{Op: "chmod", Path: name, Err: err}
	}
	if m.explicit {
		return setTimes(dirfd, base, name, m.atime, m.mtime)
	}
	return nil
}

// cleanName is tarentry.Clean with this package's refusals.
func cleanName(name string) (string, error) {
	n, err := tarentry.Clean(name)
	return n, unsafeName(err)
}

// resolveError is tarentry.ResolveError with this package's refusals.
func resolveError(path string, err error) error {
	return unsafeName(tarentry.ResolveError(path, err))
}

// unsafeName gives tarentry's refusals this package's errors (and class).
func unsafeName(err error) error {
	switch err {
	case tarentry.ErrEmptyName:
		return errEmptyName
	case tarentry.ErrNameNUL:
		return errNameNUL
	case tarentry.ErrNameTooLong:
		return errNameTooLong
	case tarentry.ErrNameEscapes:
		return errNameEscapes
	case tarentry.ErrSymlinkInPath:
		return errSymlinkInPath
	case tarentry.ErrFileInPath:
		return errFileInPath
	case tarentry.ErrOutsideRoot:
		return errOutsideRoot
	case tarentry.ErrNoOpenat2:
		return errNoOpenat2
	}
	return err
}
