//go:build !linux

package terminal

import (
	"os"

	"golang.org/x/term"
)

// Is reports whether f is a terminal.
func Is(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// Size is the terminal f's size; ok is false when f is not a terminal.
func Size(f *os.File) (rows, cols uint16, ok bool) {
	if f == nil {
		return 0, 0, false
	}
	w, h, err := term.GetSize(int(f.Fd()))
	if err != nil || w <= 0 || h <= 0 || w > 0xffff || h > 0xffff {
		return 0, 0, false
	}
	return uint16(h), uint16(w), true
}

// Raw puts the terminal f in raw mode (as cfmakeraw does) and returns how
// to restore it; nil when f is not a terminal.
func Raw(f *os.File) (restore func()) {
	fd := int(f.Fd())
	old, err := term.MakeRaw(fd)
	if err != nil {
		return nil
	}
	return func() { term.Restore(fd, old) }
}
