//go:build !windows

package terminal

import (
	"os"
	"os/signal"
	"syscall"
)

// Signals are those forwarded to a command: what a user or a supervisor
// sends to end, hang up or poke it, and SIGWINCH when it has a terminal.
func Signals(tty bool) []os.Signal {
	s := []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}
	if tty {
		s = append(s, syscall.SIGWINCH)
	}
	return s
}

// Forwarder catches Signals for a command.
type Forwarder struct {
	sigs chan os.Signal
	done chan struct{}
	size *os.File
}

// Catch starts catching Signals(tty): from now on they no longer act on
// pinfold. size is the terminal whose size a window change reports.
func Catch(tty bool, size *os.File) *Forwarder {
	f := &Forwarder{sigs: make(chan os.Signal, 8), done: make(chan struct{}), size: size}
	signal.Notify(f.sigs, Signals(tty)...)
	return f
}

// Relay passes each signal caught to sig, and a window change to resize
// with the terminal's new size, until stop is closed or Stop is called.
// It blocks: run it in a goroutine.
func (f *Forwarder) Relay(stop <-chan struct{}, sig func(syscall.Signal), resize func(rows, cols uint16)) {
	for {
		select {
		case s := <-f.sigs:
			if s == syscall.SIGWINCH {
				if rows, cols, ok := Size(f.size); ok {
					resize(rows, cols)
				}
				continue
			}
			sig(s.(syscall.Signal))
		case <-stop:
			return
		case <-f.done:
			return
		}
	}
}

// Stop stops catching the signals (they act on pinfold again) and ends
// Relay.
func (f *Forwarder) Stop() {
	signal.Stop(f.sigs)
	close(f.done)
}
