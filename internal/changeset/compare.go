package changeset

import (
	"bytes"
	"io"
)

// sameContent compares the files r1 below d1 and r2 below d2 byte by byte,
// with the buffers a and b.
func sameContent(d1, r1, d2, r2 string, a, b []byte) (bool, error) {
	f1, err := openFileIn(d1, r1)
	if err != nil {
		return false, err
	}
	defer f1.Close()
	f2, err := openFileIn(d2, r2)
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
