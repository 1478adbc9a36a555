//go:build !linux

package untrusted

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
)

// ReadSmall is the Linux one's fallback: an lstat, then a bounded read.
func ReadSmall(path string, max int64) ([]byte, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &os.PathError{Op: "read", Path: path, Err: ErrNotFile}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(b)) > max {
		err = &os.PathError{Op: "read", Path: path, Err: ErrTooLarge}
	}
	return b, err
}

// DialUnix is the Linux one's fallback: an lstat, then a dial.
func DialUnix(ctx context.Context, path string) (*net.UnixConn, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return nil, &os.PathError{Op: "dial", Path: path, Err: ErrNotSock}
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	return c.(*net.UnixConn), nil
}

// OpenFileBeneath is the Linux one's fallback: an lstat, then an open.
func OpenFileBeneath(root, rel string) (*os.File, error) {
	path := filepath.Join(root, rel)
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &os.PathError{Op: "open", Path: path, Err: ErrNotFile}
	}
	return os.Open(path)
}
