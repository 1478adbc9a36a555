package changeset

import (
	"errors"
	"io/fs"
	"time"

	"golang.org/x/sys/unix"
)

// statOf converts a stat(2) result.
func statOf(st *unix.Stat_t) Stat {
	mode := fs.FileMode(st.Mode & 0o777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	}
	if st.Mode&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if st.Mode&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if st.Mode&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return Stat{
		Mode:       mode,
		Size:       st.Size,
		UID:        st.Uid,
		GID:        st.Gid,
		ModTime:    time.Unix(st.Mtim.Sec, st.Mtim.Nsec),
		ChangeTime: time.Unix(st.Ctim.Sec, st.Ctim.Nsec),
		Ino:        st.Ino,
		Dev:        st.Dev,
		Nlink:      uint32(st.Nlink),
		Rdev:       st.Rdev,
	}
}

// statAt stats name in the directory dirfd without following a final
// symlink, and reads the target of a symlink. It returns nil, nil when the
// name does not exist (or a parent is not a directory).
func statAt(dirfd int, name string) (*Stat, error) {
	var st unix.Stat_t
	ok, err := fstatat(dirfd, name, &st)
	if !ok || err != nil {
		return nil, err
	}
	s := statOf(&st)
	if s.Mode&fs.ModeSymlink != 0 {
		t, err := readlinkAt(dirfd, name)
		if err != nil {
			return nil, err
		}
		s.Link = t
		s.Size = int64(len(t))
	}
	return &s, nil
}

// fstatat stats name in dirfd without following a final symlink; false
// when the name does not exist (or a parent is not a directory).
func fstatat(dirfd int, name string, st *unix.Stat_t) (bool, error) {
	for {
		err := unix.Fstatat(dirfd, name, st, unix.AT_SYMLINK_NOFOLLOW)
		switch err {
		case nil:
			return true, nil
		case unix.EINTR:
			continue
		case unix.ENOENT, unix.ENOTDIR:
			return false, nil
		}
		return false, err
	}
}

// lstatPath is statAt for a whole path.
func lstatPath(path string) (*Stat, error) {
	return statAt(unix.AT_FDCWD, path)
}

func readlinkAt(dirfd int, name string) (string, error) {
	for n := 256; ; n *= 2 {
		buf := make([]byte, n)
		m, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if m < n {
			return string(buf[:m]), nil
		}
		if n > 1<<20 {
			return "", errors.New("symlink target too long")
		}
	}
}

// mode bits for the kernel from a FileMode's permission bits.
func unixPerm(m fs.FileMode) uint32 {
	p := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		p |= unix.S_ISUID
	}
	if m&fs.ModeSetgid != 0 {
		p |= unix.S_ISGID
	}
	if m&fs.ModeSticky != 0 {
		p |= unix.S_ISVTX
	}
	return p
}

const oNoFollow = unix.O_NOFOLLOW

// upperWhiteout tells whether the upper entry at path (stat st) marks a
// deletion: a character device 0/0, or an empty regular file with the
// overlay's whiteout xattr.
func upperWhiteout(path string, st *Stat) bool {
	if st.Mode&fs.ModeCharDevice != 0 && st.Rdev == 0 {
		return true
	}
	if !st.Mode.IsRegular() || st.Size != 0 {
		return false
	}
	return hasXattr(path, "user.overlay.whiteout") || hasXattr(path, "trusted.overlay.whiteout")
}
