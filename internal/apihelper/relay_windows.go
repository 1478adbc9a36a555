package apihelper

import (
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/windows"

	"github.com/pinfold/pinfold/client"
	"github.com/pinfold/pinfold/internal/terminal"
)

// relay forwards Ctrl-C (and Ctrl-Break) to the remote command as SIGINT
// and a console closed as SIGTERM; Windows has no SIGWINCH, so a
// terminal's size is looked at twice a second. The signals are caught
// from the call on; attach starts forwarding them; stop ends both.
func relay(tty bool) (attach func(*client.Process), stop func()) {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	return func(p *client.Process) { forward(p, tty, sigs, done) }, func() { signal.Stop(sigs); close(done) }
}

func forward(p *client.Process, tty bool, sigs chan os.Signal, done chan struct{}) {
	go func() {
		for {
			select {
			case s := <-sigs:
				if s == syscall.SIGTERM {
					p.Signal(syscall.SIGTERM)
				} else {
					p.Signal(syscall.SIGINT)
				}
			case <-done:
				return
			}
		}
	}()
	if tty {
		go func() {
			rows, cols, _ := terminal.Size(os.Stdout)
			t := time.NewTicker(500 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					if r, c, ok := terminal.Size(os.Stdout); ok && (r != rows || c != cols) {
						rows, cols = r, c
						p.Resize(rows, cols)
					}
				case <-done:
					return
				}
			}
		}()
	}
}

// enableVT has the console interpret the remote terminal's escape
// sequences (colours, cursor moves) on stdout, as Windows 10 and later
// can; restore puts its mode back.
func enableVT() (restore func()) {
	h := windows.Handle(os.Stdout.Fd())
	var mode uint32
	if windows.GetConsoleMode(h, &mode) != nil {
		return func() {}
	}
	if windows.SetConsoleMode(h, mode|windows.ENABLE_VIRTUAL_TERMINAL_PROCESSING) != nil {
		return func() {}
	}
	return func() { windows.SetConsoleMode(h, mode) }
}
