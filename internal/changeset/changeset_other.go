//go:build !linux

package changeset

import (
	"bytes"
	"context"
	"os"
	"syscall"
)

const oNoFollow = syscall.O_NOFOLLOW

// Scan needs Linux.
func Scan(ctx context.Context, roots []Root) ([]Entry, error) { return nil, ErrUnsupported }

// ScanTypes needs Linux.
func ScanTypes(ctx context.Context, roots []Root) ([]Entry, error) { return nil, ErrUnsupported }

// Fingerprint needs Linux.
func Fingerprint(roots []Root, entries []Entry, imply bool) (Fingerprints, error) {
	return nil, ErrUnsupported
}

// Conflicts needs Linux; elsewhere it finds none.
func Conflicts(roots []Root, entries []Entry, fp Fingerprints) []Conflict { return nil }

// Apply needs Linux.
func Apply(ctx context.Context, journalDir string, roots []Root, entries []Entry, o ApplyOptions) (ApplyResult, error) {
	return ApplyResult{}, ErrUnsupported
}

// Recover needs Linux.
func Recover(ctx context.Context, journalDir string, roots []Root) error { return ErrUnsupported }

// Lock needs Linux.
func (c *Changeset) Lock() (unlock func(), err error) { return nil, ErrUnsupported }

func (c *Changeset) KeepLockOnExec(keep bool) error { return ErrUnsupported }

func lstatPath(path string) (*Stat, error) { return nil, ErrUnsupported }

func upperWhiteout(path string, st *Stat) bool { return false }

type dirCache struct{}

func (c *dirCache) release() {}

func chmodDir(path string, mode uint32) error {
	if fi, err := os.Lstat(path); err != nil || !fi.IsDir() {
		return err
	}
	return os.Chmod(path, os.FileMode(mode))
}

func statIn(root, rel string) (*Stat, error) { return nil, ErrUnsupported }

func readDirIn(root, rel string) ([]string, []*Stat, error) { return nil, nil, ErrUnsupported }

func openFileIn(root, rel string) (*os.File, error) {
	return os.OpenFile(join(root, rel), os.O_RDONLY|oNoFollow, 0)
}

func (c *dirCache) readFile(root, rel string, buf []byte, limit int, size int64) ([]byte, error) {
	f, err := openFileIn(root, rel)
	if err != nil {
		return buf, err
	}
	defer f.Close()
	for len(buf) < limit {
		if cap(buf)-len(buf) < 4096 {
			nb := make([]byte, len(buf), max(2*cap(buf), 16<<10))
			copy(nb, buf)
			buf = nb
		}
		n, err := f.Read(buf[len(buf):min(cap(buf), limit)])
		buf = buf[:len(buf)+n]
		if err != nil {
			break
		}
	}
	return buf, nil
}

func (c *dirCache) countLines(root, rel string, buf []byte) (int, bool, error) {
	data, err := c.readFile(root, rel, nil, maxTextSize+1, 0)
	if err != nil {
		return 0, false, err
	}
	if len(data) > maxTextSize || bytes.IndexByte(data[:min(len(data), binarySniff)], 0) >= 0 {
		return 0, true, nil
	}
	return countLines(data), false, nil
}

// spread needs Linux's chattr +T.
func spread(string) {}

// LockRoots needs Linux.
func LockRoots(ctx context.Context, storeDir string, roots []Root) (func(), error) {
	return nil, ErrUnsupported
}

// ReleaseInheritedLock does nothing where locks do not survive an exec.
func ReleaseInheritedLock(storeDir, id string) {}

func readBeneath(dir, rel string, limit int64) ([]byte, error) { return nil, ErrUnsupported }
