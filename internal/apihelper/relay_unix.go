//go:build !windows

package apihelper

import (
	"os"
	"syscall"

	"github.com/pinfold/pinfold/client"
	"github.com/pinfold/pinfold/internal/terminal"
)

// linuxSignal is s as Linux numbers it, which the server reads: INT,
// TERM, HUP and QUIT have the same numbers on Linux, macOS and the BSDs,
// USR1 and USR2 do not (30 and 31 there).
func linuxSignal(s syscall.Signal) syscall.Signal {
	switch s {
	case syscall.SIGUSR1:
		return 10
	case syscall.SIGUSR2:
		return 12
	}
	return s
}

// relay catches the signals pinfold-api gets (the same as a local exec's:
// terminal.Signals) from now on, before the command starts: a signal sent
// once its first output shows must not be lost to Go's default of ignoring
// USR1 and USR2. attach forwards them, and for a terminal the window's new
// sizes, to the remote command; stop ends it.
func relay(tty bool) (attach func(*client.Process), stop func()) {
	f := terminal.Catch(tty, os.Stdout)
	attach = func(p *client.Process) {
		go f.Relay(nil, func(s syscall.Signal) { p.Signal(linuxSignal(s)) }, func(rows, cols uint16) { p.Resize(rows, cols) })
	}
	return attach, f.Stop
}

// enableVT is for Windows' console; a Unix terminal reads escapes as is.
func enableVT() (restore func()) { return func() {} }
