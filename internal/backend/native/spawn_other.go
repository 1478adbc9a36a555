//go:build !linux

package native

// DiscardLauncherInit: only Linux's launcher pre-spawns an init.
func DiscardLauncherInit() {}
