package changeset

import (
	"errors"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// errNotRegular refuses a FIFO, device or socket where a file was found.
var errNotRegular = errors.New("is not a regular file")

// The trees a changeset reads are the sandbox's to write: an upper
// directory (a live session writes it while the host reads) and a
// workspace. Files in them are opened below their root without following
// any link on the way (a directory swapped for a link after the scan
// would lead outside) or at the end, O_NONBLOCK (a FIFO swapped in would
// block the open), and must still be regular files.

// openIn opens the regular file rel below the directory root for reading.
func openIn(root, rel string) (int, error) {
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(rfd)
	fd, err := openBeneath(rfd, rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: join(root, rel), Err: err}
	}
	return regularOnly(fd, join(root, rel))
}

// regularOnly closes fd and refuses it unless it is a regular file.
func regularOnly(fd int, path string) (int, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return -1, &fs.PathError{Op: "open", Path: path, Err: errNotRegular}
	}
	return fd, nil
}

// openFileIn is openIn as an *os.File.
func openFileIn(root, rel string) (*os.File, error) {
	fd, err := openIn(root, rel)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), join(root, rel)), nil
}

// readDirIn lists the directory rel below root, opened as openIn opens
// files (no link on the way), with each entry's own lstat.
func readDirIn(root, rel string) ([]string, []*Stat, error) {
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	fd, err := openBeneath(rfd, rel, unix.O_RDONLY|unix.O_DIRECTORY)
	unix.Close(rfd)
	if err != nil {
		return nil, nil, &fs.PathError{Op: "open", Path: join(root, rel), Err: err}
	}
	d := os.NewFile(uintptr(fd), join(root, rel))
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(names)
	sts := make([]*Stat, len(names))
	for i, n := range names {
		if sts[i], err = statAt(fd, n); err != nil {
			return nil, nil, &fs.PathError{Op: "lstat", Path: join(join(root, rel), n), Err: err}
		}
	}
	return names, sts, nil
}

// chmodDir changes the mode of the directory at path, never of what a
// link there (one swapped in after the walk found a directory) points to:
// the directory is opened O_PATH|O_NOFOLLOW and changed through
// /proc/self/fd.
func chmodDir(path string, mode uint32) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "chmod", Path: path, Err: err}
	}
	defer unix.Close(fd)
	return os.Chmod("/proc/self/fd/"+strconv.Itoa(fd), fs.FileMode(mode))
}

// statIn is lstatPath(join(root, rel)) resolved below root: a parent
// that became a link is an error (fstatat would follow it), a missing or
// non-directory parent is the file's absence.
func statIn(root, rel string) (*Stat, error) {
	dir, name := "", rel
	if i := strings.LastIndexByte(rel, '/'); i > 0 {
		dir, name = rel[:i], rel[i+1:]
	}
	dfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: root, Err: err}
	}
	if dir != "" {
		fd, err := openBeneath(dfd, dir, unix.O_PATH|unix.O_DIRECTORY)
		unix.Close(dfd)
		switch err {
		case nil:
		case unix.ENOENT, unix.ENOTDIR:
			return nil, nil
		default:
			return nil, &fs.PathError{Op: "lstat", Path: join(root, rel), Err: err}
		}
		dfd = fd
	}
	defer unix.Close(dfd)
	return statAt(dfd, name)
}
