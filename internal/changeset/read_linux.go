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
	key string // root, NUL, the directory below it
	fd  int
}

func (c *dirCache) release() {
	if c.key != "" {
		unix.Close(c.fd)
		c.key = ""
	}
}

// open opens the regular file rel below root for reading, as openIn does:
// no link followed on the way or at the end, no FIFO or device.
func (c *dirCache) open(root, rel string) (int, error) {
	dir, name := "", rel
	if i := strings.LastIndexByte(rel, '/'); i > 0 {
		dir, name = rel[:i], rel[i+1:]
	}
	if key := root + "\x00" + dir; key != c.key {
		c.release()
		rfd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, err
		}
		fd := rfd
		if dir != "" {
			fd, err = openBeneath(rfd, dir, unix.O_RDONLY|unix.O_DIRECTORY)
			unix.Close(rfd)
			if err != nil {
				return -1, err
			}
		}
		c.key, c.fd = key, fd
	}
	for {
		fd, err := unix.Openat(c.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fd, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			unix.Close(fd)
			return -1, errNotRegular
		}
		return fd, nil
	}
}

// readFile appends the content of the file at path to buf, reading at
// most limit bytes. size is the expected size, to size buf; a short read
// is the end of the file, which saves a read on small files.
func (c *dirCache) readFile(root, rel string, buf []byte, limit int, size int64) ([]byte, error) {
	path := join(root, rel)
	fd, err := c.open(root, rel)
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
func (c *dirCache) countLines(root, rel string, buf []byte) (n int, binary bool, err error) {
	path := join(root, rel)
	fd, err := c.open(root, rel)
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
