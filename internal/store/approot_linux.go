package store

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// ErrRootDigest is wrapped when an app's root image does not match the
// digest its file names for it.
var ErrRootDigest = errors.New("the app's root image does not match its digest")

// CheckAppRoot checks that the size bytes at off in the opened file f (an
// app's squashfs root image) have digest. A check that passed is recorded
// under the file's identity (device, inode, size, times, as st gives them)
// in index/approot/, so that later runs of the same file cost one small
// read; a file changed since misses the record and is read again. st must
// be f's own fstat, so that what is recorded is what was read.
func (s *Store) CheckAppRoot(f *os.File, st *unix.Stat_t, off, size int64, digest string) error {
	key := appRootKey(st, off, size, digest)
	name := s.dir + "/index/approot/" + key
	var buf [8]byte
	if n, err := readSmall(name, buf[:]); err == nil && n == 3 && string(buf[:3]) == "ok\n" {
		return nil
	}
	h := sha256.New()
	n, err := io.CopyBuffer(h, io.NewSectionReader(f, off, size), make([]byte, 1<<20))
	if err != nil {
		return fmt.Errorf("reading the app's root image: %w", err)
	}
	if got := digestPrefix + hex.EncodeToString(h.Sum(nil)); n != size || got != digest {
		return fmt.Errorf("%s: %w (%s, want %s)", f.Name(), ErrRootDigest, got, digest)
	}
	// The file must not have changed while it was read.
	var after unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &after); err != nil {
		return err
	}
	if appRootKey(&after, off, size, digest) != key {
		return fmt.Errorf("%s changed while its root image was checked", f.Name())
	}
	if err := os.MkdirAll(s.dir+"/index/approot", 0o700); err != nil {
		return nil // checked; only not recorded
	}
	tmp, err := s.workName()
	if err != nil {
		return nil
	}
	if err := os.WriteFile(tmp, []byte("ok\n"), 0o600); err != nil {
		os.Remove(tmp)
		return nil
	}
	if err := os.Rename(tmp, name); err != nil {
		os.Remove(tmp)
	}
	return nil
}

func appRootKey(st *unix.Stat_t, off, size int64, digest string) string {
	b := make([]byte, 0, 160)
	b = append(b, "pinfold app root 1\x00"...)
	for _, v := range [...]uint64{
		st.Dev, st.Ino, uint64(st.Size),
		uint64(st.Mtim.Sec), uint64(st.Mtim.Nsec),
		uint64(st.Ctim.Sec), uint64(st.Ctim.Nsec),
		uint64(off), uint64(size),
	} {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	b = append(b, digest...)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
