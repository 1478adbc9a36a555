package store

import (
	"archive/tar"
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/pinfold/pinfold/internal/tarentry"
	"golang.org/x/sys/unix"
)

// limits bound one extraction and say how to set ownership.
type limits struct {
	maxBytes   int64
	maxEntries int
	chown      bool   // set owners (root only)
	shift      uint32 // added to archive ids when chown is set
}

func (o ImportOptions) limits(chown bool) limits {
	l := limits{maxBytes: o.MaxBytes, maxEntries: o.MaxEntries, chown: chown, shift: o.UIDShift}
	if l.maxBytes <= 0 {
		l.maxBytes = defaultMaxBytes
	}
	if l.maxEntries <= 0 {
		l.maxEntries = defaultMaxEntries
	}
	return l
}

// streamMax bounds the decompressed tar stream: file data plus generous
// room for headers, long names and padding, so that a stream of headers
// alone cannot run for ever.
func (l limits) streamMax() int64 {
	const perEntry = 8 << 10
	m := l.maxBytes
	if extra := int64(l.maxEntries)*perEntry + 1<<20; m < 1<<62-extra {
		m += extra
	} else {
		m = 1 << 62
	}
	return m
}

// extractStats tells what an extraction did.
type extractStats struct {
	entries int   // entries read, skipped ones included
	made    int   // directories made for entries whose parents were not listed
	bytes   int64 // bytes of file data and symlink targets written
	skipped int   // device nodes and fifos under dev/ left out
}

// Reasons an entry is refused.
var (
	errEmptyName      = &reason{"entry name is empty", unsafeArchive}
	errNameNUL        = &reason{"entry name contains a NUL byte", unsafeArchive}
	errNameTooLong    = &reason{"entry name is longer than 4096 bytes", unsafeArchive}
	errNameEscapes    = &reason{"entry name escapes the root with ..", unsafeArchive}
	errSymlinkInPath  = &reason{"path traverses a symlink", unsafeArchive}
	errFileInPath     = &reason{"path goes through a file that is not a directory", unsafeArchive}
	errOutsideRoot    = &reason{"path leaves the extraction root", unsafeArchive}
	errReplaceDir     = &reason{"would replace a directory with a non-directory", unsafeArchive}
	errDevice         = &reason{"archive contains a device node outside dev/", unsafeArchive}
	errFifo           = &reason{"archive contains a fifo outside dev/", unsafeArchive}
	errLinkTarget     = &reason{"symlink target is empty, too long or contains a NUL byte", unsafeArchive}
	errHardlinkTarget = &reason{"hard link target is not a regular file extracted from this archive", unsafeArchive}
	errNoOpenat2      = errors.New("openat2 is not available; pinfold needs Linux 5.6 or later")
)

// extractArchive reads the archive in br, plain or compressed, extracts it
// into root, an existing empty directory, and reads the tar stream and the
// decompressor to their ends so that every byte is checked. On error root
// may hold part of the tree, which the caller removes. allowExec allows
// host decompressors.
func extractArchive(ctx context.Context, archive string, br *bufio.Reader, root string, lim limits, allowExec bool) (extractStats, error) {
	d, err := decompress(ctx, archive, br, allowExec)
	if err != nil {
		return extractStats{}, err
	}
	st, err := extract(ctx, archive, d.r, root, lim)
	if err != nil {
		// A decompressor that failed explains a broken tar stream
		// better than the tar reader can.
		if derr := d.wait(true); derr != nil {
			return st, derr
		}
		return st, err
	}
	return st, d.wait(false)
}

// extract extracts the tar stream r into root and reads r to its end.
func extract(ctx context.Context, archive string, r io.Reader, root string, lim limits) (extractStats, error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return extractStats{}, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	x := &extractor{
		archive:  archive,
		root:     fd,
		rootPath: root,
		lim:      lim,
		files:    make(map[string]struct{}),
		dirs:     map[string]*dirMeta{"": {mode: 0o755}},
		cacheFd:  -1,
	}
	defer x.close()
	if lim.chown {
		if err := unix.Fchown(fd, int(lim.shift), int(lim.shift)); err != nil {
			return extractStats{}, &fs.PathError{Op: "chown", Path: root, Err: err}
		}
	}

	in := &tarStream{r: r, max: lim.streamMax()}
	tr := tar.NewReader(in)
	last := ""
	for {
		if err := ctx.Err(); err != nil {
			return x.stats, fmt.Errorf("extracting archive %s: %w", archive, err)
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		// ErrInsecurePath comes with a usable header; names get their
		// own, stricter checks below.
		if err != nil && (hdr == nil || !errors.Is(err, tar.ErrInsecurePath)) {
			return x.stats, x.streamError(last, err)
		}
		x.stats.entries++
		if err := x.count(0); err != nil {
			return x.stats, &EntryError{Archive: archive, Entry: hdr.Name, Err: err}
		}
		if err := x.entry(hdr, tr); err != nil {
			return x.stats, &EntryError{Archive: archive, Entry: hdr.Name, Err: err}
		}
		last = hdr.Name
	}
	if x.stats.entries == 0 {
		return x.stats, fmt.Errorf("archive %s has no entries", archive)
	}
	if !in.ended() {
		return x.stats, fmt.Errorf("archive %s is truncated: no end-of-archive marker after entry %s", archive, tarentry.Quote(last))
	}
	if err := x.finish(); err != nil {
		return x.stats, err
	}
	// Read on past the end-of-archive marker so that a compressed stream
	// is checked to its end and the digest covers every byte.
	if _, err := io.Copy(io.Discard, in); err != nil {
		return x.stats, fmt.Errorf("reading archive %s after its end: %w", archive, err)
	}
	return x.stats, nil
}

// count checks the limits after n more bytes. Directories made for
// unlisted parents count as entries, so that deep names cannot make more
// inodes than MaxEntries.
func (x *extractor) count(n int64) error {
	if x.stats.entries+x.stats.made > x.lim.maxEntries {
		return &reason{fmt.Sprintf("archive has more than %d entries", x.lim.maxEntries), limitExceeded}
	}
	if n > x.lim.maxBytes-x.stats.bytes {
		return &reason{fmt.Sprintf("archive expands beyond %d bytes", x.lim.maxBytes), limitExceeded}
	}
	x.stats.bytes += n
	return nil
}

func (x *extractor) streamError(last string, err error) error {
	where := "at its start"
	if last != "" {
		where = "after entry " + tarentry.Quote(last)
	}
	if err == io.ErrUnexpectedEOF {
		return fmt.Errorf("archive %s is truncated %s: %w", x.archive, where, err)
	}
	return fmt.Errorf("reading archive %s %s: %w", x.archive, where, err)
}

// tarStream counts the decompressed stream, caps it, and remembers where
// its last non-zero byte was, to tell an archive that ends with the zero
// blocks of an end-of-archive marker from one cut short between entries.
type tarStream struct {
	r        io.Reader
	n        int64 // bytes read
	lastData int64 // offset just past the last non-zero byte read
	max      int64
}

func (t *tarStream) Read(p []byte) (int, error) {
	if room := t.max - t.n + 1; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := t.r.Read(p)
	for i := n - 1; i >= 0; i-- {
		if p[i] != 0 {
			t.lastData = t.n + int64(i) + 1
			break
		}
	}
	t.n += int64(n)
	if t.n > t.max {
		return n, &reason{fmt.Sprintf("archive expands beyond %d bytes of tar stream", t.max), limitExceeded}
	}
	return n, err
}

func (t *tarStream) ended() bool { return t.n-t.lastData >= 512 }

// dirMeta is what a directory gets once all entries are in place.
type dirMeta struct {
	mode         uint32
	atime, mtime time.Time
	explicit     bool // listed in the archive (others were made for their children)
}

type extractor struct {
	archive  string
	root     int // the extraction root, opened
	rootPath string
	lim      limits
	stats    extractStats

	files map[string]struct{} // regular files this archive created, by clean name
	dirs  map[string]*dirMeta // directories this archive created, by clean name; "" is the root

	// The directory of the previous entry, which is usually the next
	// entry's too. Directories are never removed or replaced during an
	// extraction, so a name keeps meaning the same directory.
	cacheDir string
	cacheFd  int

	buf []byte
}

func (x *extractor) close() {
	if x.cacheFd >= 0 {
		unix.Close(x.cacheFd)
	}
	unix.Close(x.root)
}

func (x *extractor) entry(hdr *tar.Header, data io.Reader) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	name, err := cleanName(hdr.Name)
	if err != nil {
		return err
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
		// The sandbox builds its own /dev; device nodes are never made.
		if name == "dev" || strings.HasPrefix(name, "dev/") {
			x.stats.skipped++
			return nil
		}
		if hdr.Typeflag == tar.TypeFifo {
			return errFifo
		}
		return errDevice
	}
	return &reason{fmt.Sprintf("unsupported entry type %s", tarentry.Quote(string(hdr.Typeflag))), unsafeArchive}
}

// parent returns an fd of the directory that holds name, creating missing
// directories, and name's last component. The fd belongs to x.
func (x *extractor) parent(name string) (int, string, error) {
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return x.root, name, nil
	}
	dir, base := name[:i], name[i+1:]
	if x.cacheFd >= 0 && x.cacheDir == dir {
		return x.cacheFd, base, nil
	}
	fd, err := x.openDir(dir, true)
	if err != nil {
		return -1, "", err
	}
	if x.cacheFd >= 0 {
		unix.Close(x.cacheFd)
	}
	x.cacheFd, x.cacheDir = fd, dir
	return fd, base, nil
}

// openDir opens the directory dir (a clean name, not the root) as an O_PATH
// fd that the caller closes. With create, missing directories are made,
// as tar does for entries whose parents the archive does not list.
func (x *extractor) openDir(dir string, create bool) (int, error) {
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
			x.stats.made++
			if err := x.count(0); err != nil {
				if cur != x.root {
					unix.Close(cur)
				}
				return -1, err
			}
			err = unix.Mkdirat(cur, comp, 0o700)
			if err == nil {
				x.dirs[prefix] = &dirMeta{mode: 0o755}
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

// replace clears the way for a non-directory at name: an existing
// non-directory is removed, as tar does; a directory is an error.
func (x *extractor) replace(dirfd int, base, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "lstat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return errReplaceDir
	}
	if err := unix.Unlinkat(dirfd, base, 0); err != nil {
		return &fs.PathError{Op: "unlink", Path: name, Err: err}
	}
	delete(x.files, name)
	return nil
}

// owner maps the entry's ids to the ids stored on disk.
func (x *extractor) owner(hdr *tar.Header) (int, int, error) {
	const maxID = 1<<32 - 2 // -1 means "unchanged" to chown
	uid, gid := int64(hdr.Uid)+int64(x.lim.shift), int64(hdr.Gid)+int64(x.lim.shift)
	if hdr.Uid < 0 || hdr.Gid < 0 || uid > maxID || gid > maxID {
		return 0, 0, &reason{fmt.Sprintf("owner %d:%d is out of range", hdr.Uid, hdr.Gid), unsafeArchive}
	}
	// Shifted, the ids land in the range the sandbox maps (ShiftedIDs
	// from the shift); an id past it would land on a host id the sandbox
	// does not own, perhaps another user's.
	if x.lim.shift != 0 && (hdr.Uid >= tarentry.ShiftedIDs || hdr.Gid >= tarentry.ShiftedIDs) {
		return 0, 0, &reason{fmt.Sprintf("owner %d:%d is outside the %d ids a sandbox maps", hdr.Uid, hdr.Gid, tarentry.ShiftedIDs), unsafeArchive}
	}
	return int(uid), int(gid), nil
}

// chownAt sets the owner of base in dirfd, never following a symlink.
func (x *extractor) chownAt(dirfd int, base, name string, hdr *tar.Header) error {
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

func (x *extractor) setTimes(dirfd int, base, name string, atime, mtime time.Time) error {
	if atime.IsZero() {
		atime = mtime
	}
	ts := []unix.Timespec{tarentry.Timespec(atime), tarentry.Timespec(mtime)}
	if err := unix.UtimesNanoAt(dirfd, base, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "utimes", Path: name, Err: err}
	}
	return nil
}

// fileMode keeps the permission bits of a file and drops setuid, setgid
// and sticky.
func fileMode(m int64) uint32 { return uint32(m) & 0o777 }

// dirMode keeps the permission bits and sticky bit of a directory and drops
// setuid and setgid.
func dirMode(m int64) uint32 { return uint32(m) & (0o777 | unix.S_ISVTX) }

func (x *extractor) mkdir(name string, hdr *tar.Header) error {
	meta := &dirMeta{mode: dirMode(hdr.Mode), atime: hdr.AccessTime, mtime: hdr.ModTime, explicit: true}
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
	err = unix.Mkdirat(dirfd, base, 0o700)
	if err == unix.EEXIST {
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &fs.PathError{Op: "lstat", Path: name, Err: err}
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = nil // listed again, or made earlier for a child
		} else {
			if err := x.replace(dirfd, base, name); err != nil {
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
	return nil
}

func (x *extractor) writeFile(name string, hdr *tar.Header, data io.Reader) error {
	if hdr.Size < 0 {
		return &reason{"negative size", unsafeArchive}
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
		if err := x.replace(dirfd, base, name); err != nil {
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
		if err = unix.Fchmod(fd, fileMode(hdr.Mode)); err != nil {
			err = &fs.PathError{Op: "chmod", Path: name, Err: err}
		}
	}
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = &fs.PathError{Op: "close", Path: name, Err: cerr}
	}
	if err != nil {
		return err
	}
	x.files[name] = struct{}{}
	return x.setTimes(dirfd, base, name, hdr.AccessTime, hdr.ModTime)
}

// copyData writes the entry's size bytes of data to fd.
func (x *extractor) copyData(fd int, name string, data io.Reader, size int64) error {
	if x.buf == nil {
		x.buf = make([]byte, 128<<10)
	}
	err := tarentry.Copy(fd, name, data, size, x.buf)
	if err == io.ErrUnexpectedEOF {
		return fmt.Errorf("archive is truncated: %w", err)
	}
	return err
}

// symlink stores the target as it is: absolute targets are normal in a
// root filesystem and resolve inside the sandbox at run time. Nothing here
// ever follows it.
func (x *extractor) symlink(name string, hdr *tar.Header) error {
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
		if err := x.replace(dirfd, base, name); err != nil {
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
	return x.setTimes(dirfd, base, name, hdr.AccessTime, hdr.ModTime)
}

// hardlink links name to an earlier regular file of the archive.
func (x *extractor) hardlink(name string, hdr *tar.Header) error {
	target, err := cleanName(hdr.Linkname)
	if err != nil {
		return fmt.Errorf("hard link target %s: %w", tarentry.Quote(hdr.Linkname), err)
	}
	if _, ok := x.files[target]; !ok || target == name {
		return errHardlinkTarget
	}
	tdir, tbase := x.root, target
	if i := strings.LastIndexByte(target, '/'); i >= 0 {
		fd, err := x.openDir(target[:i], false)
		if err != nil {
			return fmt.Errorf("hard link target %s: %w", tarentry.Quote(hdr.Linkname), err)
		}
		defer unix.Close(fd)
		tdir, tbase = fd, target[i+1:]
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
		if err := x.replace(dirfd, base, name); err != nil {
			return err
		}
		err = unix.Linkat(tdir, tbase, dirfd, base, 0)
	}
	if err != nil {
		return &fs.PathError{Op: "link", Path: name, Err: err}
	}
	x.files[name] = struct{}{}
	return nil
}

// finish gives directories their final mode and times, deepest first, so
// that a read-only directory blocks nothing and setting one directory's
// times is not undone by work in it.
func (x *extractor) finish() error {
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
				return fmt.Errorf("archive %s: %w", x.archive, &fs.PathError{Op: "chmod", Path: x.rootPath, Err: err})
			}
			if m.explicit {
				if err := x.setTimes(unix.AT_FDCWD, x.rootPath, x.rootPath, m.atime, m.mtime); err != nil {
					return fmt.Errorf("archive %s: %w", x.archive, err)
				}
			}
			continue
		}
		if err := x.finishDir(n, m); err != nil {
			return &EntryError{Archive: x.archive, Entry: n, Err: err}
		}
	}
	return nil
}

func (x *extractor) finishDir(name string, m *dirMeta) error {
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
		return x.setTimes(dirfd, base, name, m.atime, m.mtime)
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
