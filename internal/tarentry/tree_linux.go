package tarentry

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// More reasons an entry is refused.
var (
	ErrReplaceDir     = errors.New("would replace a directory with a non-directory")
	ErrLinkTarget     = errors.New("symlink target is empty, too long or contains a NUL byte")
	ErrHardlinkTarget = errors.New("hard link target is not a regular file")
)

// Unsafe is a refusal with its own text (an owner out of range, an
// unknown entry type); Limit one of the Tree's bounds.
type (
	Unsafe struct{ Msg string }
	Limit  struct{ Msg string }
)

func (e *Unsafe) Error() string { return e.Msg }
func (e *Limit) Error() string  { return e.Msg }

// A Tree writes the entries of tar streams below a root directory, the
// core that extracting an archive (internal/store) and applying image
// layers (internal/oci) share. Every lookup is an openat2 below the root
// that never follows a symlink; nothing is created, removed or linked
// through one. Directories are made 0700 until Finish gives them their
// modes, so that later entries can write in them whatever those are.
type Tree struct {
	// Chown sets entries' owners, shifted by Shift; ids past ShiftedIDs
	// are refused when shifting.
	Chown bool
	Shift uint32
	// KeepSUID keeps setuid and setgid bits (and a directory's setgid).
	KeepSUID bool
	// MaxBytes and MaxEntries bound what the tree takes; Limits words the
	// refusal ("archive has more than 10 entries").
	MaxBytes, MaxEntries int64
	Limits               func(entries bool, max int64) string
	// Layers: an entry replaces whatever is at its path, a directory with
	// all it holds, and a hard link may name any regular file below the
	// root (a lower layer's). Otherwise an entry replaces only a
	// non-directory, and hard links name files this stream wrote.
	Layers bool
	// Placed, when set, hears each name an entry put in place (and the
	// directories made for it), with created false for a directory that
	// was there already.
	Placed func(name string, created bool)
	// Truncated is the text of a stream that ends inside an entry's data.
	Truncated string

	// Counters.
	Entries, Bytes int64
	Made           int64 // directories made for unlisted parents
	Removed        int64 // paths removed to make way (Layers)

	root     int
	rootPath string
	dirs     map[string]*dirMeta
	files    map[string]struct{}
	cacheDir string
	cacheFd  int
	buf      []byte
}

// dirMeta is what a directory gets from Finish.
type dirMeta struct {
	mode         uint32
	atime, mtime time.Time
	explicit     bool // listed (others were made for their children)
}

// Open starts the tree at root, an existing directory, which it owns by
// the shift when chowning. Close releases it.
func (t *Tree) Open(root string) error {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: root, Err: err}
	}
	t.root, t.rootPath, t.cacheFd = fd, root, -1
	t.dirs = map[string]*dirMeta{"": {mode: 0o755}}
	t.files = map[string]struct{}{}
	if t.Chown {
		if err := unix.Fchown(fd, int(t.Shift), int(t.Shift)); err != nil {
			unix.Close(fd)
			return &fs.PathError{Op: "chown", Path: root, Err: err}
		}
	}
	return nil
}

// Close releases the tree's descriptors.
func (t *Tree) Close() {
	t.dropCache()
	unix.Close(t.root)
}

// Root is the root's descriptor.
func (t *Tree) Root() int { return t.root }

func (t *Tree) dropCache() {
	if t.cacheFd >= 0 {
		unix.Close(t.cacheFd)
		t.cacheFd, t.cacheDir = -1, ""
	}
}

// Count checks the bounds after n more bytes. Directories made for
// unlisted parents count as entries, so that deep names cannot make more
// inodes than MaxEntries.
func (t *Tree) Count(n int64) error {
	if t.Entries+t.Made > t.MaxEntries {
		return &Limit{t.Limits(true, t.MaxEntries)}
	}
	if n > t.MaxBytes-t.Bytes {
		return &Limit{t.Limits(false, t.MaxBytes)}
	}
	t.Bytes += n
	return nil
}

func (t *Tree) placed(name string, created bool) {
	if t.Placed != nil {
		t.Placed(name, created)
	}
}

// SplitName splits a clean name into its directory ("" for the root) and
// last component.
func SplitName(name string) (string, string) {
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return "", name
	}
	return name[:i], name[i+1:]
}

// parent returns a descriptor of the directory that holds name, making
// missing directories, and name's last component. The descriptor is the
// tree's.
func (t *Tree) parent(name string) (int, string, error) {
	dir, base := SplitName(name)
	if dir == "" {
		return t.root, name, nil
	}
	if t.cacheFd >= 0 && t.cacheDir == dir {
		return t.cacheFd, base, nil
	}
	fd, err := t.OpenDir(dir, true)
	if err != nil {
		return -1, "", err
	}
	t.dropCache()
	t.cacheFd, t.cacheDir = fd, dir
	return fd, base, nil
}

// OpenDir opens the directory dir (a clean name, not the root) as an
// O_PATH descriptor the caller closes. With create, missing directories
// are made, as tar does for entries whose parents the stream does not
// list.
func (t *Tree) OpenDir(dir string, create bool) (int, error) {
	const flags = unix.O_PATH | unix.O_DIRECTORY
	fd, err := OpenBeneath(t.root, dir, flags)
	if err == nil {
		return fd, nil
	}
	if err != unix.ENOENT || !create {
		return -1, ResolveError(dir, err)
	}
	cur := t.root
	for i, end := 0, 0; i < len(dir); i = end + 1 {
		end = len(dir)
		if j := strings.IndexByte(dir[i:], '/'); j >= 0 {
			end = i + j
		}
		comp, prefix := dir[i:end], dir[:end]
		next, err := OpenBeneath(cur, comp, flags)
		if err == unix.ENOENT {
			t.Made++
			if err := t.Count(0); err != nil {
				if cur != t.root {
					unix.Close(cur)
				}
				return -1, err
			}
			err = unix.Mkdirat(cur, comp, 0o700)
			if err == nil {
				t.dirs[prefix] = &dirMeta{mode: 0o755}
				t.placed(prefix, true)
				if t.Chown {
					err = unix.Fchownat(cur, comp, int(t.Shift), int(t.Shift), unix.AT_SYMLINK_NOFOLLOW)
				}
			}
			if err == nil || err == unix.EEXIST {
				next, err = OpenBeneath(cur, comp, flags)
			}
		}
		if cur != t.root {
			unix.Close(cur)
		}
		if err != nil {
			return -1, ResolveError(prefix, err)
		}
		cur = next
	}
	return cur, nil
}

// clear makes way at base in dirfd for a new entry: with Layers whatever
// is there goes, else a non-directory does and a directory is refused.
func (t *Tree) clear(dirfd int, base, name string) error {
	if t.Layers {
		return t.RemoveAll(dirfd, base, name)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "lstat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return ErrReplaceDir
	}
	if err := unix.Unlinkat(dirfd, base, 0); err != nil {
		return &fs.PathError{Op: "unlink", Path: name, Err: err}
	}
	delete(t.files, name)
	return nil
}

// RemoveAll removes base in dirfd and, if it is a directory, all it
// holds, never following a symlink. A missing base is not an error.
func (t *Tree) RemoveAll(dirfd int, base, name string) error {
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
		delete(t.files, name)
		t.Removed++
		return nil
	}
	// A new directory of the same name would be another inode.
	if t.cacheFd >= 0 && (t.cacheDir == name || strings.HasPrefix(t.cacheDir, name+"/")) {
		t.dropCache()
	}
	names, err := ReadDirNames(dirfd, base, name)
	if err != nil {
		return err
	}
	if len(names) > 0 {
		fd, err := unix.Openat(dirfd, base, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &fs.PathError{Op: "open", Path: name, Err: err}
		}
		for _, n := range names {
			if err = t.RemoveAll(fd, n, name+"/"+n); err != nil {
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
	delete(t.dirs, name)
	t.Removed++
	return nil
}

// ReadDirNames lists the directory base in dirfd ("." for dirfd itself).
func ReadDirNames(dirfd int, base, name string) ([]string, error) {
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

// Finish gives directories their final modes and times, deepest first,
// so that a read-only directory blocks nothing and setting one
// directory's times is not undone by work in it. On error it names the
// directory ("" for the root).
func (t *Tree) Finish() (string, error) {
	names := make([]string, 0, len(t.dirs))
	for n := range t.dirs {
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
		m := t.dirs[n]
		if n == "" {
			if err := unix.Fchmod(t.root, m.mode); err != nil {
				return "", &fs.PathError{Op: "chmod", Path: t.rootPath, Err: err}
			}
			if m.explicit {
				if err := setTimes(unix.AT_FDCWD, t.rootPath, t.rootPath, m.atime, m.mtime); err != nil {
					return "", err
				}
			}
			continue
		}
		if err := t.finishDir(n, m); err != nil {
			return n, err
		}
	}
	return "", nil
}

func (t *Tree) finishDir(name string, m *dirMeta) error {
	dirfd, base, err := t.parent(name)
	if err != nil {
		return err
	}
	fd, err := OpenBeneath(dirfd, base, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return ResolveError(name, err)
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
