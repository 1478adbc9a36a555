package changeset

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Lock takes the changeset's lock (flock on <dir>/lock) without waiting.
// When another process holds it the error matches [ErrBusy] and names
// the holder's pid when known.
func (c *Changeset) Lock() (unlock func(), err error) {
	path := filepath.Join(c.Dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking changeset %s: %w", c.Meta.ID, err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	if err == unix.EWOULDBLOCK {
		var buf [32]byte
		n, _ := f.ReadAt(buf[:], 0)
		f.Close()
		holder := "another pinfold process"
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(buf[:n]))); perr == nil && pid > 0 {
			holder = "pinfold process " + strconv.Itoa(pid)
		}
		return nil, fmt.Errorf("%w: changeset %s is held by %s (a command still running, or an apply or discard in progress)", ErrBusy, c.Meta.ID, holder)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("locking changeset %s: %w", c.Meta.ID, err)
	}
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	c.lock = f
	return func() {
		c.lock = nil
		f.Truncate(0)
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, nil
}

// KeepLockOnExec makes the lock this process holds survive (keep) or not
// survive an exec: a run that hands off to the waiter passes it on, so
// the changeset stays locked until the run is recorded (the lock belongs
// to the open file, whoever holds its descriptor). The pid in the lock
// file stays right, as an exec keeps the pid.
func (c *Changeset) KeepLockOnExec(keep bool) error {
	if c.lock == nil {
		return fmt.Errorf("changeset %s is not locked by this process", c.Meta.ID)
	}
	flags := unix.FD_CLOEXEC
	if keep {
		flags = 0
	}
	_, err := unix.FcntlInt(c.lock.Fd(), unix.F_SETFD, flags)
	return err
}

// ReleaseInheritedLock releases the lock of changeset id in storeDir that
// this process got across an exec (pinfold __finish, after a run handed
// off), once the changeset is recorded: what waits for the run's end (a
// session's stop, then an apply) must find it free, not wait for this
// process to exit. The descriptor is found by the lock file's path.
func ReleaseInheritedLock(storeDir, id string) {
	path := filepath.Join(storeDir, changesetsDir, id, lockName)
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if t, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && t == path {
			unix.Ftruncate(fd, 0)
			unix.Flock(fd, unix.LOCK_UN)
			unix.Close(fd)
		}
	}
}

// LockRoots serialises the applies to the same directories: it takes an
// exclusive flock on <store>/locks/apply-<hash of the directory> for each
// root's original directory, in a fixed order, waiting while another
// process holds one, and returns what releases them. Held across the
// conflict check, the journal and the renames, it makes concurrent applies
// of changesets that touch the same files see each other: one writes, the
// others find the conflict.
func LockRoots(ctx context.Context, storeDir string, roots []Root) (unlock func(), err error) {
	dir := filepath.Join(storeDir, "locks")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("locking the workspace: %w", err)
	}
	names := make([]string, 0, len(roots))
	for _, r := range roots {
		sum := sha256.Sum256([]byte(r.Lower))
		names = append(names, "apply-"+hex.EncodeToString(sum[:12]))
	}
	slices.Sort(names)
	names = slices.Compact(names)
	var held []*os.File
	release := func() {
		for _, f := range held {
			unix.Flock(int(f.Fd()), unix.LOCK_UN)
			f.Close()
		}
	}
	for _, n := range names {
		f, err := os.OpenFile(filepath.Join(dir, n), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
		if err != nil {
			release()
			return nil, fmt.Errorf("locking the workspace: %w", err)
		}
		for {
			err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
			if err != unix.EWOULDBLOCK && err != unix.EINTR {
				break
			}
			select {
			case <-ctx.Done():
				f.Close()
				release()
				return nil, ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
		if err != nil {
			f.Close()
			release()
			return nil, fmt.Errorf("locking the workspace: %w", err)
		}
		held = append(held, f)
	}
	return release, nil
}
