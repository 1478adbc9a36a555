package config

import "unsafe"

// stringOf returns b's bytes as a string without copying them. b must
// never change afterwards: Load uses it on the buffer it read the file
// into and keeps no other reference to.
func stringOf(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
