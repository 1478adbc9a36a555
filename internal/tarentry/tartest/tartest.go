// Package tartest builds the tar streams that the tests of archive
// extraction (internal/store) and layer application (internal/oci) feed
// their code: plain entries, hostile ones, compressed streams.
package tartest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"testing"
	"time"
)

// Time is every entry's modification time.
var Time = time.Date(2021, 3, 4, 5, 6, 7, 0, time.UTC)

// Entry is one tar entry and its data.
type Entry struct {
	Hdr  tar.Header
	Body string
}

// Dir is a directory entry.
func Dir(name string, mode int64) Entry {
	return Entry{Hdr: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, ModTime: Time}}
}

// File is a regular file entry holding body.
func File(name string, mode int64, body string) Entry {
	return Entry{Hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body)), ModTime: Time}, Body: body}
}

// Symlink is a symbolic link entry.
func Symlink(name, target string) Entry {
	return Entry{Hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, ModTime: Time}}
}

// Hardlink is a hard link entry.
func Hardlink(name, target string) Entry {
	return Entry{Hdr: tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target, ModTime: Time}}
}

// Special is a device or fifo entry of type typ (device 1:3).
func Special(typ byte, name string) Entry {
	return Entry{Hdr: tar.Header{Typeflag: typ, Name: name, Mode: 0o600, Devmajor: 1, Devminor: 3, ModTime: Time}}
}

// Owned is e owned by uid and gid.
func Owned(e Entry, uid, gid int) Entry {
	e.Hdr.Uid, e.Hdr.Gid = uid, gid
	return e
}

// Tar writes ents as a tar stream.
func Tar(t testing.TB, ents ...Entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := e.Hdr
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("writing header %q: %v", h.Name, err)
		}
		if _, err := tw.Write([]byte(e.Body)); err != nil {
			t.Fatalf("writing %q: %v", h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Gzip compresses b.
func Gzip(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
