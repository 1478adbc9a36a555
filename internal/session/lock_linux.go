package session

import (
	"golang.org/x/sys/unix"
)

// lock takes the session's lock, a flock on its directory, waiting for
// it: whoever records the end of a session whose supervisor is gone
// (check) or changes its state from outside (pause, resume) holds it, so
// that of many looking at once (each request of a server lists its
// tenant's sessions) one records and the others read what it recorded.
func (s *Store) lock(id string) (unlock func(), err error) {
	fd, err := unix.Open(s.Path(id), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return func() { unix.Close(fd) }, nil
}
