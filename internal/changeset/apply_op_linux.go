package changeset

// The operations of an apply's journal, each done beneath its root's
// directory descriptor: directories, files (written aside, then renamed),
// symbolic and hard links, removals and metadata.

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"

	"golang.org/x/sys/unix"
)

func (a *applier) parent(o *op) (int, string, func(), error) {
	parent, name := splitPath(string(o.Path))
	fd, release, err := a.dir(o.Root, parent, true, o.Owner)
	return fd, name, release, err
}

func (a *applier) mkdir(o *op) error {
	pfd, name, release, err := a.parent(o)
	if err != nil {
		return err
	}
	defer release()
	err = unix.Mkdirat(pfd, name, 0o700)
	if err == unix.EEXIST {
		st, serr := statAt(pfd, name)
		if serr != nil {
			return serr
		}
		if st != nil && st.Mode.IsDir() {
			return nil
		}
		if err = unix.Unlinkat(pfd, name, 0); err != nil && err != unix.ENOENT {
			return err
		}
		err = unix.Mkdirat(pfd, name, 0o700)
	}
	if err != nil {
		return err
	}
	if o.Owner != nil {
		return unix.Fchownat(pfd, name, int(o.Owner.UID), int(o.Owner.GID), unix.AT_SYMLINK_NOFOLLOW)
	}
	return nil
}

// aside creates the temporary name with make, replacing a leftover.
func aside(pfd int, tmp string, make func() error) error {
	err := make()
	if err == unix.EEXIST {
		if err = unix.Unlinkat(pfd, tmp, 0); err == nil || err == unix.ENOENT {
			err = make()
		}
	}
	return err
}

func times(mtime int64) []unix.Timespec {
	return []unix.Timespec{{Sec: 0, Nsec: unix.UTIME_OMIT}, unix.NsecToTimespec(mtime)}
}

func (a *applier) file(i int, o *op) (err error) {
	pfd, name, release, err := a.parent(o)
	if err != nil {
		return err
	}
	defer release()
	// O_NONBLOCK: a FIFO found where the file was does not block the apply.
	src, err := openBeneath(a.upper[o.Root], string(o.Path), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK)
	if err != nil {
		if unsafeErr(err) {
			return fmt.Errorf("%w: the changed version is not a regular file", ErrUnsafe)
		}
		return fmt.Errorf("opening the changed version: %w", err)
	}
	defer unix.Close(src)
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%w: the changed version is not a regular file", ErrUnsafe)
	}
	tmp := a.tmpName(i)
	var dst int
	err = aside(pfd, tmp, func() error {
		var err error
		dst, err = unix.Openat(pfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		return err
	})
	if err != nil {
		return err
	}
	defer func() {
		if dst >= 0 {
			unix.Close(dst)
		}
		if err != nil {
			unix.Unlinkat(pfd, tmp, 0)
		}
	}()
	if err = copyFD(dst, src, st.Size); err != nil {
		return err
	}
	if o.Owner != nil {
		if err = unix.Fchown(dst, int(o.Owner.UID), int(o.Owner.GID)); err != nil {
			return err
		}
	}
	if err = unix.Fchmod(dst, unixPerm(fs.FileMode(o.Mode))); err != nil {
		return err
	}
	if err = unix.UtimesNanoAt(pfd, tmp, times(o.MTime), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	err = unix.Close(dst)
	dst = -1
	if err != nil {
		return err
	}
	return unix.Renameat(pfd, tmp, pfd, name)
}

// copyFD copies src, size bytes when it was opened, to dst from their
// current offsets: to its end, or size bytes (which saves the call that
// finds the end).
func copyFD(dst, src int, size int64) error {
	if size == 0 {
		return copyRW(dst, src)
	}
	first := true
	var done int64
	for {
		n, err := unix.CopyFileRange(src, nil, dst, nil, 1<<30, 0)
		if err == nil && n > 0 {
			if done += int64(n); done == size {
				return nil
			}
		}
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EXDEV || err == unix.EINVAL || err == unix.ENOSYS || err == unix.EOPNOTSUPP || err == unix.EBADF || (n == 0 && err == nil && first):
			return copyRW(dst, src)
		case err != nil:
			return err
		case n == 0:
			return nil
		}
		first = false
	}
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

func copyRW(dst, src int) error {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	for {
		n, err := unix.Read(src, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		for w := 0; w < n; {
			m, err := unix.Write(dst, buf[w:n])
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return err
			}
			w += m
		}
	}
}

func (a *applier) symlink(i int, o *op) (err error) {
	pfd, name, release, err := a.parent(o)
	if err != nil {
		return err
	}
	defer release()
	tmp := a.tmpName(i)
	if err = aside(pfd, tmp, func() error { return unix.Symlinkat(string(o.Target), pfd, tmp) }); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			unix.Unlinkat(pfd, tmp, 0)
		}
	}()
	if o.Owner != nil {
		if err = unix.Fchownat(pfd, tmp, int(o.Owner.UID), int(o.Owner.GID), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	if err = unix.UtimesNanoAt(pfd, tmp, times(o.MTime), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	return unix.Renameat(pfd, tmp, pfd, name)
}

func (a *applier) link(i int, o *op) (err error) {
	pfd, name, release, err := a.parent(o)
	if err != nil {
		return err
	}
	defer release()
	sdir, sname := splitPath(string(o.Src))
	sfd, srelease, err := a.dir(o.Root, sdir, false, nil)
	if err != nil {
		return err
	}
	defer srelease()
	tmp := a.tmpName(i)
	if err = aside(pfd, tmp, func() error { return unix.Linkat(sfd, sname, pfd, tmp, 0) }); err != nil {
		return err
	}
	err = unix.Renameat(pfd, tmp, pfd, name)
	// Renaming a link over another link to the same file does nothing.
	unix.Unlinkat(pfd, tmp, 0)
	return err
}

func (a *applier) remove(o *op) error {
	parent, name := splitPath(string(o.Path))
	pfd, release, err := a.dir(o.Root, parent, false, nil)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) && (pe.Err == unix.ENOENT || pe.Err == unix.ENOTDIR) {
			return nil // the parent is gone: so is the path
		}
		return err
	}
	defer release()
	flags := 0
	if o.Kind == opRmdir {
		flags = unix.AT_REMOVEDIR
	}
	err = unix.Unlinkat(pfd, name, flags)
	switch {
	case err == nil || err == unix.ENOENT:
		return nil
	case o.Kind == opRmdir && err == unix.ENOTDIR:
		return nil // no longer a directory: a later operation replaced it
	case o.Kind == opRmdir && (err == unix.ENOTEMPTY || err == unix.EEXIST):
		a.mu.Lock()
		a.left++
		if o.Entry {
			a.applied-- // counted back as skipped
		}
		a.mu.Unlock()
		return nil
	}
	return err
}

func (a *applier) meta(o *op) error {
	pfd, name, release, err := a.parent(o)
	if err != nil {
		return err
	}
	defer release()
	fd, err := openBeneath(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		if unsafeErr(err) {
			return fmt.Errorf("%w: a symbolic link is in the way", ErrUnsafe)
		}
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, unixPerm(fs.FileMode(o.Mode))); err != nil {
		return err
	}
	return unix.UtimesNanoAt(pfd, name, times(o.MTime), unix.AT_SYMLINK_NOFOLLOW)
}
