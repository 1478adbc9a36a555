package changeset

import (
	"bytes"
	"io"
	"os"
)

// sameContent compares two files byte by byte, with the buffers a and b.
func sameContent(p1, p2 string, a, b []byte) (bool, error) {
	f1, err := openNoFollow(p1)
	if err != nil {
		return false, err
	}
	defer f1.Close()
	f2, err := openNoFollow(p2)
	if err != nil {
		return false, err
	}
	defer f2.Close()
	for {
		n1, err1 := io.ReadFull(f1, a)
		n2, err2 := io.ReadFull(f2, b[:len(a)])
		if n1 != n2 || !bytes.Equal(a[:n1], b[:n2]) {
			return false, nil
		}
		if err1 == io.EOF || err1 == io.ErrUnexpectedEOF {
			return err2 == io.EOF || err2 == io.ErrUnexpectedEOF, nil
		}
		if err1 != nil {
			return false, err1
		}
		if err2 != nil {
			if err2 == io.EOF || err2 == io.ErrUnexpectedEOF {
				return false, nil
			}
			return false, err2
		}
	}
}

// openNoFollow opens a file for reading, refusing a symlink.
func openNoFollow(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|oNoFollow, 0)
}
