package tarentry

import (
	"io"
	"io/fs"
	"time"

	"golang.org/x/sys/unix"
)

// Beneath resolves a path below its directory only, without any symbolic
// link, magic link or mount crossing.
const Beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// OpenBeneath opens path below dirfd without following any symlink.
func OpenBeneath(dirfd int, path string, flags uint64) (int, error) {
	how := unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Resolve: Beneath}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(dirfd, path, &how)
		if (err == unix.EAGAIN || err == unix.EINTR) && i < 16 {
			continue
		}
		return fd, err
	}
}

// ResolveError explains why OpenBeneath could not open path.
func ResolveError(path string, err error) error {
	switch err {
	case unix.ELOOP:
		return ErrSymlinkInPath
	case unix.ENOTDIR:
		return ErrFileInPath
	case unix.EXDEV:
		return ErrOutsideRoot
	case unix.ENOSYS:
		return ErrNoOpenat2
	}
	return &fs.PathError{Op: "open", Path: path, Err: err}
}

// Timespec converts t for utimensat.
func Timespec(t time.Time) unix.Timespec {
	return unix.Timespec{Sec: t.Unix(), Nsec: int64(t.Nanosecond())}
}

// Copy writes size bytes of data to fd (name is for errors) through buf.
// Data that ends early is io.ErrUnexpectedEOF, which the caller reports
// as a truncated archive or layer.
func Copy(fd int, name string, data io.Reader, size int64, buf []byte) error {
	var n int64
	for n < size {
		m, rerr := data.Read(buf[:min(int64(len(buf)), size-n)])
		for w := buf[:m]; len(w) > 0; {
			k, err := unix.Write(fd, w)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return &fs.PathError{Op: "write", Path: name, Err: err}
			}
			w = w[k:]
		}
		n += int64(m)
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	if n != size {
		return io.ErrUnexpectedEOF
	}
	return nil
}
