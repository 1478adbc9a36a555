package untrusted

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"

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
