//go:build !linux

package main

// serve: the agent runs in Linux sandboxes only.
func serve([]string) (int, bool) { return 2, false }
