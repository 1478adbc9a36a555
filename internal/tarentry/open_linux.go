package tarentry

import (
	"bytes"
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

// Copy writes size bytes of data to fd, through buf, leaving holes where
// whole blocks are zero: a sparse file in an archive (GNU or PAX sparse,
// which archive/tar expands into zeros) stays sparse on disk, so that a
// few hundred bytes of archive cannot fill the disk with gigabytes of
// zeros (the entry's logical size still counts against the import's
// limits).
func Copy(fd int, name string, data io.Reader, size int64, buf []byte) error {
	var n, hole int64
	for n < size {
		m, rerr := data.Read(buf[:min(int64(len(buf)), size-n)])
		for b := buf[:m]; len(b) > 0; {
			// The next run of zero blocks becomes a hole, the next run
			// of others one write.
			k := min(len(b), holeBlock)
			if len(b) >= holeBlock && allZero(b[:holeBlock]) {
				for k+holeBlock <= len(b) && allZero(b[k:k+holeBlock]) {
					k += holeBlock
				}
				hole += int64(k)
				b = b[k:]
				continue
			}
			for k+holeBlock <= len(b) && !allZero(b[k:k+holeBlock]) {
				k += holeBlock
			}
			if k+holeBlock > len(b) {
				k = len(b)
			}
			if hole > 0 {
				if _, err := unix.Seek(fd, hole, io.SeekCurrent); err != nil {
					return &fs.PathError{Op: "seek", Path: name, Err: err}
				}
				hole = 0
			}
			for w := b[:k]; len(w) > 0; {
				c, err := unix.Write(fd, w)
				if err == unix.EINTR {
					continue
				}
				if err != nil {
					return &fs.PathError{Op: "write", Path: name, Err: err}
				}
				w = w[c:]
			}
			b = b[k:]
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
	if hole > 0 {
		// A file that ends in a hole: its size, without the blocks.
		if err := unix.Ftruncate(fd, size); err != nil {
			return &fs.PathError{Op: "truncate", Path: name, Err: err}
		}
	}
	return nil
}

// holeBlock is the unit of holes: a filesystem block.
const holeBlock = 4096

var zeroBlock [holeBlock]byte

func allZero(b []byte) bool { return bytes.Equal(b, zeroBlock[:len(b)]) }
