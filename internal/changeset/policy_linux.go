package changeset

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// readBeneath reads the regular file rel below dir, refusing any symbolic
// link on the way (a sandbox wrote what is below dir), and at most limit
// bytes.
func readBeneath(dir, rel string, limit int64) ([]byte, error) {
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	how := unix.OpenHow{Flags: unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NONBLOCK,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	var fd int
	for i := 0; ; i++ {
		fd, err = unix.Openat2(dfd, rel, &how)
		if (err != unix.EAGAIN && err != unix.EINTR) || i >= 16 {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, errors.New("larger than 1 MiB")
	}
	return b, nil
}
