package store

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// CheckOnce runs check on the opened file f unless a check of what for the
// same file passed before: a check that passes is recorded under the file's
// identity (device, inode, size, modification and change times, from f's
// own fstat) in index/checked/, so that later runs of the same file cost
// one small read; a file changed since misses the record and is checked
// again. A file that changes while it is checked is refused.
func (s *Store) CheckOnce(f *os.File, what string, check func() error) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	key := checkKey(&st, what)
	name := s.dir + "/index/checked/" + key
	var buf [8]byte
	if n, err := readSmall(name, buf[:]); err == nil && n == 3 && string(buf[:3]) == "ok\n" {
		return nil
	}
	if err := check(); err != nil {
		return err
	}
	var after unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &after); err != nil {
		return err
	}
	if checkKey(&after, what) != key {
		return fmt.Errorf("%s changed while it was checked", f.Name())
	}
	for _, d := range [...]string{"tmp", "index/checked"} {
		if err := os.MkdirAll(s.dir+"/"+d, 0o700); err != nil {
			return nil // checked; only not recorded
		}
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

func checkKey(st *unix.Stat_t, what string) string {
	b := make([]byte, 0, 160)
	b = append(b, "pinfold checked file 1\x00"...)
	for _, v := range [...]uint64{
		st.Dev, st.Ino, uint64(st.Size),
		uint64(st.Mtim.Sec), uint64(st.Mtim.Nsec),
		uint64(st.Ctim.Sec), uint64(st.Ctim.Nsec),
	} {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	b = append(b, what...)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
