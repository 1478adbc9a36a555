package changeset

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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
	return func() {
		f.Truncate(0)
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, nil
}
