//go:build !windows

package apihelper

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/pinfold/pinfold/client"
)

// relay forwards the signals pinfold-api gets to the remote command and,
// for a terminal, the window's new sizes; stop ends it.
func relay(p *client.Process, tty bool) (stop func()) {
	sigs := make(chan os.Signal, 8)
	// The numbers of these four are the same on Linux, macOS and the BSDs:
	// the server reads them as Linux's.
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGWINCH)
	go func() {
		for s := range sigs {
			if s == syscall.SIGWINCH {
				if rows, cols, ok := size(); ok {
					p.Resize(rows, cols)
				}
				continue
			}
			p.Signal(s.(syscall.Signal))
		}
	}()
	return func() { signal.Stop(sigs) }
}

// enableVT is for Windows' console; a Unix terminal reads escapes as is.
func enableVT() (restore func()) { return func() {} }
