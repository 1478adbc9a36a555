package untrusted

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ReadSmall reads the regular file at path, at most max bytes: a final
// symlink, a FIFO, a device, a directory or a larger file is refused
// without being read (O_NONBLOCK: opening a FIFO does not wait for a
// writer). The directories on the way must be the host's own.
func ReadSmall(path string, max int64) ([]byte, error) {
	fd, err := openFile(path)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, &os.PathError{Op: "read", Path: path, Err: ErrNotFile}
	}
	if st.Size > max {
		return nil, &os.PathError{Op: "read", Path: path, Err: ErrTooLarge}
	}
	// The file may grow after the fstat: the read is bounded itself.
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, &os.PathError{Op: "read", Path: path, Err: ErrTooLarge}
	}
	return b, nil
}

func openFile(path string) (int, error) {
	for {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		switch err {
		case nil:
			return fd, nil
		case unix.EINTR:
			continue
		case unix.ELOOP:
			return -1, &os.PathError{Op: "open", Path: path, Err: ErrLink}
		}
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
}

// DialUnix connects to the unix socket at path without following a final
// symlink: a link planted in its place (to a docker, dbus or another
// session's socket) is refused, not dialled. The socket is opened O_PATH
// and reached through /proc/self/fd, so what is checked is what is
// dialled.
func DialUnix(ctx context.Context, path string) (*net.UnixConn, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "dial", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "dial", Path: path, Err: err}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFSOCK:
	case unix.S_IFLNK:
		return nil, &os.PathError{Op: "dial", Path: path, Err: ErrLink}
	default:
		return nil, &os.PathError{Op: "dial", Path: path, Err: ErrNotSock}
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(fd))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", path, err)
	}
	return c.(*net.UnixConn), nil
}

// OpenFileBeneath opens the regular file rel below the directory root for
// reading: no symlink on the way or at the end (openat2 RESOLVE_BENEATH
// and RESOLVE_NO_SYMLINKS, or one name at a time with O_NOFOLLOW where
// openat2 is missing), no FIFO or device. root itself is the host's.
func OpenFileBeneath(root, rel string) (*os.File, error) {
	path := filepath.Join(root, rel)
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(rfd)
	flags := unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	how := unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	var fd int
	for i := 0; ; i++ {
		fd, err = unix.Openat2(rfd, rel, &how)
		if (err == unix.EAGAIN || err == unix.EINTR) && i < 100 {
			continue
		}
		break
	}
	if err == unix.ENOSYS {
		fd, err = openWalk(rfd, rel, flags)
	}
	if err == unix.ELOOP {
		err = ErrLink
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		if err == nil {
			err = ErrNotFile
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return f, nil
}

// openWalk resolves rel one name at a time, refusing links and "..".
func openWalk(dirfd int, rel string, flags int) (int, error) {
	names := strings.Split(filepath.Clean(rel), "/")
	cur := dirfd
	for i, n := range names {
		if n == ".." || n == "" {
			return -1, unix.EXDEV
		}
		f := unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if i == len(names)-1 {
			f = flags | unix.O_NOFOLLOW
		}
		fd, err := unix.Openat(cur, n, f, 0)
		if cur != dirfd {
			unix.Close(cur)
		}
		if err != nil {
			return -1, err
		}
		cur = fd
	}
	return cur, nil
}
