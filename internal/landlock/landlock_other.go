//go:build !linux

package landlock

// ABI is 0: Landlock is Linux's.
func ABI() int { return 0 }
