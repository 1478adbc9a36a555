// Package tarentry is the one place pinfold writes tar entries to disk:
// extracting a tarball base (internal/store) and applying image layers
// (internal/oci) both go through its Tree, which cleans entry names, opens
// every path below the root without following a symbolic link, makes
// directories, files, symbolic and hard links with bounded sizes and
// counts, shifts owners, drops set-id bits, and gives directories their
// modes last. What differs between the two is a setting (Layers: an entry
// replaces a lower layer's whole tree, hard links may reach lower layers)
// or stays with the caller (OCI whiteouts through the Placed hook and
// RemoveAll; device nodes). Its errors are plain; internal/store and
// internal/oci give them their own classes (unsafe archive, unsafe layer).
package tarentry

import (
	"errors"
	"strings"
)

// MaxName caps entry names and link targets, like PATH_MAX.
const MaxName = 4096

// Why an entry name or path is refused.
var (
	ErrEmptyName     = errors.New("entry name is empty")
	ErrNameNUL       = errors.New("entry name contains a NUL byte")
	ErrNameTooLong   = errors.New("entry name is longer than 4096 bytes")
	ErrNameEscapes   = errors.New("entry name escapes the root with ..")
	ErrSymlinkInPath = errors.New("path traverses a symlink")
	ErrFileInPath    = errors.New("path goes through a file that is not a directory")
	ErrOutsideRoot   = errors.New("path leaves the root")
	ErrNoOpenat2     = errors.New("openat2 is not available; pinfold needs Linux 5.6 or later")
)

// ShiftedIDs is how many ids a sandbox maps when pinfold runs as root
// (inside 0..ShiftedIDs-1 is host shift+0..): an archive's owners must
// lie below it to be extracted with the shift.
const ShiftedIDs = 65536

// Clean turns an entry name into a clean path relative to the root:
// leading "/" and "." components go, "a/../b" becomes "b". A ".." that
// would climb above the root, a NUL byte or an overlong name is an error.
// The root itself is "".
func Clean(name string) (string, error) {
	switch {
	case name == "":
		return "", ErrEmptyName
	case len(name) > MaxName:
		return "", ErrNameTooLong
	case strings.IndexByte(name, 0) >= 0:
		return "", ErrNameNUL
	}
	if Simple(name) {
		return name, nil
	}
	parts := make([]string, 0, strings.Count(name, "/")+1)
	for c := range strings.SplitSeq(name, "/") {
		switch c {
		case "", ".":
		case "..":
			if len(parts) == 0 {
				return "", ErrNameEscapes
			}
			parts = parts[:len(parts)-1]
		default:
			parts = append(parts, c)
		}
	}
	return strings.Join(parts, "/"), nil
}

// Simple reports whether name is already clean: no empty, "." or ".."
// component.
func Simple(name string) bool {
	for c := range strings.SplitSeq(name, "/") {
		if c == "" || c == "." || c == ".." {
			return false
		}
	}
	return true
}

// Quote quotes a name for an error message, keeping it on one line and
// short.
func Quote(s string) string {
	const max = 200
	if len(s) > max {
		s = s[:max] + "..."
	}
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c == 0x7f:
			const hex = "0123456789abcdef"
			b = append(b, '\\', 'x', hex[c>>4], hex[c&15])
		default:
			b = append(b, c)
		}
	}
	return string(append(b, '"'))
}

// HeadBuffer keeps the first Max bytes written to it (a decompressing
// tool's stderr, for its error message).
type HeadBuffer struct {
	b   []byte
	Max int
}

func (h *HeadBuffer) Write(p []byte) (int, error) {
	if room := h.Max - len(h.b); room > 0 {
		h.b = append(h.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (h *HeadBuffer) String() string { return string(h.b) }

// Classes turns this package's refusals into a caller's errors, so that
// each caller keeps its own error classes (unsafe archive, unsafe layer).
type Classes struct {
	Named         map[error]error // this package's sentinel errors -> the caller's
	Unsafe, Limit func(msg string) error
}

// Of returns err as the caller's error, or err itself when it is none of
// this package's refusals.
func (c *Classes) Of(err error) error {
	var u *Unsafe
	var l *Limit
	switch {
	case errors.As(err, &u):
		return c.Unsafe(u.Msg)
	case errors.As(err, &l):
		return c.Limit(l.Msg)
	}
	if e, ok := c.Named[err]; ok {
		return e
	}
	return err
}
