package cgroup

import (
	"bytes"
	"io"
	"io/fs"
	"strconv"

	"golang.org/x/sys/unix"
)

// The helpers below talk to cgroupfs with bare system calls: one open, one
// read or write and one close per file, no fstat and no buffered readers.

// writeFile writes data to the existing file at path in one write(2),
// which is how cgroupfs expects a value. Errors are *fs.PathError holding
// the errno, so errors.Is(err, unix.ENOENT) works.
func writeFile(path string, data []byte) error {
	fd, err := openRetry(path, unix.O_WRONLY|unix.O_CLOEXEC)
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var n int
	for {
		n, err = unix.Write(fd, data)
		if err != unix.EINTR {
			break
		}
	}
	unix.Close(fd)
	if err == nil && n != len(data) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return &fs.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
}

// writeInt writes the decimal form of v to path.
func writeInt(path string, v int64) error {
	var b [24]byte
	return writeFile(path, strconv.AppendInt(b[:0], v, 10))
}

// readFile returns the whole content of path. cgroupfs and procfs files
// report size 0, so it reads until EOF into a buffer of size bytes that
// grows when the content is larger.
func readFile(path string, size int) ([]byte, error) {
	fd, err := openRetry(path, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		case n == 0:
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

func openRetry(path string, flags int) (int, error) {
	for {
		fd, err := unix.Open(path, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// mkdir creates dir. It returns the bare errno so callers can compare it.
func mkdir(dir string) error {
	for {
		err := unix.Mkdir(dir, 0o755)
		if err != unix.EINTR {
			return err
		}
	}
}

// access reports whether the effective user may access path in mode
// (unix.W_OK, unix.F_OK), as the errno faccessat2 returns.
func access(path string, mode uint32) error {
	return unix.Faccessat(unix.AT_FDCWD, path, mode, unix.AT_EACCESS)
}

// keyValue returns the value of the line "key value" in data, the format
// of memory.events, pids.events, cpu.stat and memory.oom_control.
func keyValue(data []byte, key string) (int64, bool) {
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if len(line) > len(key) && line[len(key)] == ' ' && string(line[:len(key)]) == key {
			v, err := strconv.ParseInt(string(line[len(key)+1:]), 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}

// hasPids reports whether a cgroup.procs content lists any process.
func hasPids(data []byte) bool {
	for _, c := range data {
		if c >= '0' && c <= '9' {
			return true
		}
	}
	return false
}

// eachPid calls f for every process ID in a cgroup.procs content.
func eachPid(data []byte, f func(pid int)) {
	pid, digits := 0, false
	for _, c := range data {
		if c >= '0' && c <= '9' {
			pid = pid*10 + int(c-'0')
			digits = true
			continue
		}
		if digits {
			f(pid)
		}
		pid, digits = 0, false
	}
	if digits {
		f(pid)
	}
}
