package changeset

import (
	"bytes"
	"io/fs"
	"strings"

	"golang.org/x/sys/unix"
)

// dirCache keeps the directory of the last file a worker read open, so
// that reading many files of one directory resolves one name each.
type dirCache struct {
	path string
	fd   int
}

func (c *dirCache) release() {
	if c.path != "" {
		unix.Close(c.fd)
		c.path = ""
	}
}

// open opens path for reading without following a final symlink.
func (c *dirCache) open(path string) (int, error) {
	dirfd, name := unix.AT_FDCWD, path
	if i := strings.LastIndexByte(path, '/'); i > 0 {
		dir := path[:i]
		if dir != c.path {
			c.release()
			fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err == nil {
				c.path, c.fd = dir, fd
			}
		}
		if dir == c.path {
			dirfd, name = c.fd, path[i+1:]
		}
	}
	for {
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// readFile appends the content of the file at path to buf, reading at
// most limit bytes. size is the expected size, to size buf; a short read
// is the end of the file, which saves a read on small files.
func (c *dirCache) readFile(path string, buf []byte, limit int, size int64) ([]byte, error) {
	fd, err := c.open(path)
	if err != nil {
		return buf, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	start := len(buf)
	if want := start + int(min(size, int64(limit))) + 1; cap(buf) < want {
		nb := make([]byte, start, max(want, 16<<10))
		copy(nb, buf)
		buf = nb
	}
	for len(buf) < limit {
		if cap(buf)-len(buf) < 4096 {
			nb := make([]byte, len(buf), max(2*cap(buf), 16<<10))
			copy(nb, buf)
			buf = nb
		}
		ask := min(cap(buf), limit) - len(buf)
		n, err := unix.Read(fd, buf[len(buf):len(buf)+ask])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return buf, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		buf = buf[:len(buf)+n]
		// A short read of a regular file is its end.
		if n < ask {
			break
		}
	}
	return buf, nil
}

// countLines counts the lines of the file at path, reading it through
// buf: a NUL in its first binarySniff bytes, or more than maxTextSize
// bytes, make it binary.
func (c *dirCache) countLines(path string, buf []byte) (n int, binary bool, err error) {
	fd, err := c.open(path)
	if err != nil {
		return 0, false, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	total, last := 0, byte('\n')
	for {
		m, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, false, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			break
		}
		chunk := buf[:m]
		if total < binarySniff && bytes.IndexByte(chunk[:min(m, binarySniff-total)], 0) >= 0 {
			return 0, true, nil
		}
		total += m
		if total > maxTextSize {
			return 0, true, nil
		}
		n += bytes.Count(chunk, []byte{'\n'})
		last = chunk[m-1]
		if m < len(buf) {
			break // a short read of a regular file is its end
		}
	}
	if last != '\n' {
		n++
	}
	return n, false, nil
}
