//go:build !linux

package terminal

import "os"

// Is reports whether f is a terminal; pinfold knows terminals on Linux only.
func Is(f *os.File) bool { return false }

// Size is the terminal f's size; ok is false when f is not a terminal.
func Size(f *os.File) (rows, cols uint16, ok bool) { return 0, 0, false }

// Raw puts the terminal f in raw mode; nil when f is not a terminal.
func Raw(f *os.File) (restore func()) { return nil }
