//go:build !linux

package procstat

// Idle does nothing off Linux.
func Idle(pid int) {}
