package store

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"
)

// TreeDigest is the identity of a root filesystem by its content: the
// sha256 of a canonical listing of every entry in path order (byte order)
// — its path, type, permission bits, owner and group, and for a regular
// file its size and sha256, for a symlink its target. Times, inode numbers
// and the order directories list their entries in are not part of it, nor
// are the paths skip reports true for (relative, without a leading slash).
func TreeDigest(root string, skip func(rel string) bool) (string, error) {
	h := sha256.New()
	var rec []byte
	buf := make([]byte, 256<<10)
	var walk func(dir, rel string) error
	walk = func(dir, rel string) error {
		f, err := os.Open(dir)
		if err != nil {
			return err
		}
		names, err := f.Readdirnames(-1)
		f.Close()
		if err != nil {
			return err
		}
		sort.Strings(names)
		for _, n := range names {
			r := n
			if rel != "" {
				r = rel + "/" + n
			}
			if skip != nil && skip(r) {
				continue
			}
			p := dir + "/" + n
			var st unix.Stat_t
			if err := unix.Lstat(p, &st); err != nil {
				return &fs.PathError{Op: "lstat", Path: p, Err: err}
			}
			rec = rec[:0]
			rec = binary.BigEndian.AppendUint32(rec, uint32(len(r)))
			rec = append(rec, r...)
			rec = binary.BigEndian.AppendUint32(rec, st.Mode)
			rec = binary.BigEndian.AppendUint32(rec, st.Uid)
			rec = binary.BigEndian.AppendUint32(rec, st.Gid)
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFREG:
				sum, err := fileSum(p, buf)
				if err != nil {
					return err
				}
				rec = binary.BigEndian.AppendUint64(rec, uint64(st.Size))
				rec = append(rec, sum...)
			case unix.S_IFLNK:
				t, err := os.Readlink(p)
				if err != nil {
					return err
				}
				rec = binary.BigEndian.AppendUint32(rec, uint32(len(t)))
				rec = append(rec, t...)
			case unix.S_IFCHR, unix.S_IFBLK:
				rec = binary.BigEndian.AppendUint64(rec, st.Rdev)
			}
			h.Write(rec)
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				if err := walk(p, r); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(filepath.Clean(root), ""); err != nil {
		return "", fmt.Errorf("digesting %s: %w", root, err)
	}
	return digestPrefix + hex.EncodeToString(h.Sum(nil)), nil
}

func fileSum(path string, buf []byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyBuffer(h, f, buf); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}
