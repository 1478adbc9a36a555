package tarentry

// Writing the entries: directories, files, symbolic and hard links, each
// beneath the tree's root, with the owner shift and the modes applied.

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// owner maps the entry's ids to the ids stored on disk.
func (t *Tree) owner(hdr *tar.Header) (int, int, error) {
	const maxID = 1<<32 - 2 // -1 means "unchanged" to chown
	uid, gid := int64(hdr.Uid)+int64(t.Shift), int64(hdr.Gid)+int64(t.Shift)
	if hdr.Uid < 0 || hdr.Gid < 0 || uid > maxID || gid > maxID {
		return 0, 0, &Unsafe{fmt.Sprintf("owner %d:%d is out of range", hdr.Uid, hdr.Gid)}
	}
	// Shifted, the ids land in the range the sandbox maps (ShiftedIDs
	// from the shift); an id past it would land on a host id the sandbox
	// does not own, perhaps another user's.
	if t.Shift != 0 && (hdr.Uid >= ShiftedIDs || hdr.Gid >= ShiftedIDs) {
		return 0, 0, &Unsafe{fmt.Sprintf("owner %d:%d is outside the %d ids a sandbox maps", hdr.Uid, hdr.Gid, ShiftedIDs)}
	}
	return int(uid), int(gid), nil
}

// chownAt sets the owner of base in dirfd, never following a symlink.
func (t *Tree) chownAt(dirfd int, base, name string, hdr *tar.Header) error {
	if !t.Chown {
		return nil
	}
	uid, gid, err := t.owner(hdr)
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
	ts := []unix.Timespec{Timespec(atime), Timespec(mtime)}
	if err := unix.UtimesNanoAt(dirfd, base, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "utimes", Path: name, Err: err}
	}
	return nil
}

// fileMode keeps a file's permission bits, setuid and setgid only with
// KeepSUID, and never sticky.
func (t *Tree) fileMode(m int64) uint32 {
	if t.KeepSUID {
		return uint32(m) & (0o777 | unix.S_ISUID | unix.S_ISGID)
	}
	return uint32(m) & 0o777
}

// dirMode keeps a directory's permission bits and sticky bit, and setgid
// only with KeepSUID.
func (t *Tree) dirMode(m int64) uint32 {
	if t.KeepSUID {
		return uint32(m) & (0o777 | unix.S_ISVTX | unix.S_ISGID)
	}
	return uint32(m) & (0o777 | unix.S_ISVTX)
}

// Mkdir makes the directory name ("" is the root), or merges with one
// already there.
func (t *Tree) Mkdir(name string, hdr *tar.Header) error {
	meta := &dirMeta{mode: t.dirMode(hdr.Mode), atime: hdr.AccessTime, mtime: hdr.ModTime, explicit: true}
	if name == "" {
		if t.Chown {
			uid, gid, err := t.owner(hdr)
			if err != nil {
				return err
			}
			if err := unix.Fchown(t.root, uid, gid); err != nil {
				return &fs.PathError{Op: "chown", Path: ".", Err: err}
			}
		}
		t.dirs[""] = meta
		return nil
	}
	dirfd, base, err := t.parent(name)
	if err != nil {
		return err
	}
	created := true
	err = unix.Mkdirat(dirfd, base, 0o700)
	if err == unix.EEXIST {
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &fs.PathError{Op: "lstat", Path: name, Err: err}
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			// Listed again, made earlier for a child, or a lower
			// layer's: they merge.
			err, created = nil, false
		} else {
			if err := t.clear(dirfd, base, name); err != nil {
				return err
			}
			err = unix.Mkdirat(dirfd, base, 0o700)
		}
	}
	if err != nil {
		return &fs.PathError{Op: "mkdir", Path: name, Err: err}
	}
	if err := t.chownAt(dirfd, base, name, hdr); err != nil {
		return err
	}
	t.dirs[name] = meta
	t.placed(name, created)
	return nil
}

// WriteFile writes the regular file name with hdr.Size bytes of data.
func (t *Tree) WriteFile(name string, hdr *tar.Header, data io.Reader) error {
	if hdr.Size < 0 {
		return &Unsafe{"negative size"}
	}
	// Checked and counted before anything is written. A sparse file
	// counts its full size.
	if err := t.Count(hdr.Size); err != nil {
		return err
	}
	dirfd, base, err := t.parent(name)
	if err != nil {
		return err
	}
	const flags = unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(dirfd, base, flags, 0o600)
	if err == unix.EEXIST {
		if err := t.clear(dirfd, base, name); err != nil {
			return err
		}
		fd, err = unix.Openat(dirfd, base, flags, 0o600)
	}
	if err != nil {
		return &fs.PathError{Op: "create", Path: name, Err: err}
	}
	if t.buf == nil {
		t.buf = make([]byte, 128<<10)
	}
	err = Copy(fd, name, data, hdr.Size, t.buf)
	if err == io.ErrUnexpectedEOF {
		err = fmt.Errorf("%s: %w", t.Truncated, err)
	}
	if err == nil && t.Chown {
		var uid, gid int
		if uid, gid, err = t.owner(hdr); err == nil {
			if err = unix.Fchown(fd, uid, gid); err != nil {
				err = &fs.PathError{Op: "chown", Path: name, Err: err}
			}
		}
	}
	if err == nil {
		// After the chown, which clears setuid and setgid.
		if err = unix.Fchmod(fd, t.fileMode(hdr.Mode)); err != nil {
			err = &fs.PathError{Op: "chmod", Path: name, Err: err}
		}
	}
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = &fs.PathError{Op: "close", Path: name, Err: cerr}
	}
	if err != nil {
		return err
	}
	t.files[name] = struct{}{}
	t.placed(name, true)
	return setTimes(dirfd, base, name, hdr.AccessTime, hdr.ModTime)
}

// Symlink stores the target as it is: absolute targets are normal in a
// root filesystem and resolve inside the sandbox at run time. Nothing here
// ever follows it.
func (t *Tree) Symlink(name string, hdr *tar.Header) error {
	target := hdr.Linkname
	if target == "" || len(target) > MaxName || strings.IndexByte(target, 0) >= 0 {
		return ErrLinkTarget
	}
	if err := t.Count(int64(len(target))); err != nil {
		return err
	}
	dirfd, base, err := t.parent(name)
	if err != nil {
		return err
	}
	err = unix.Symlinkat(target, dirfd, base)
	if err == unix.EEXIST {
		if err := t.clear(dirfd, base, name); err != nil {
			return err
		}
		err = unix.Symlinkat(target, dirfd, base)
	}
	if err != nil {
		return &fs.PathError{Op: "symlink", Path: name, Err: err}
	}
	if err := t.chownAt(dirfd, base, name, hdr); err != nil {
		return err
	}
	t.placed(name, true)
	return setTimes(dirfd, base, name, hdr.AccessTime, hdr.ModTime)
}

// Hardlink links name to target (a clean name): a regular file this
// stream wrote, or with Layers any regular file below the root.
func (t *Tree) Hardlink(name, target string) error {
	if target == "" || target == name {
		return ErrHardlinkTarget
	}
	if _, ok := t.files[target]; !ok && !t.Layers {
		return ErrHardlinkTarget
	}
	tdir, tbase := t.root, target
	if d, b := SplitName(target); d != "" {
		fd, err := t.OpenDir(d, false)
		if errors.Is(err, fs.ErrNotExist) {
			return ErrHardlinkTarget
		}
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		tdir, tbase = fd, b
	}
	var st unix.Stat_t
	if err := unix.Fstatat(tdir, tbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return ErrHardlinkTarget
	}
	dirfd, base, err := t.parent(name)
	if err != nil {
		return err
	}
	// linkat without AT_SYMLINK_FOLLOW never dereferences the target.
	err = unix.Linkat(tdir, tbase, dirfd, base, 0)
	if err == unix.EEXIST {
		if err := t.clear(dirfd, base, name); err != nil {
			return err
		}
		err = unix.Linkat(tdir, tbase, dirfd, base, 0)
	}
	if err != nil {
		return &fs.PathError{Op: "link", Path: name, Err: err}
	}
	t.files[name] = struct{}{}
	t.placed(name, true)
	return nil
}
