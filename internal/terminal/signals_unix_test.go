//go:build !windows

package terminal

import (
	"os"
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestRelay: every signal of Signals reaches the command, the user's
// USR1 and USR2 too (the remote exec once dropped them).
func TestRelay(t *testing.T) {
	if !slices.Contains(Signals(false), os.Signal(syscall.SIGUSR1)) || !slices.Contains(Signals(false), os.Signal(syscall.SIGUSR2)) {
		t.Fatalf("USR1 and USR2 are not forwarded: %v", Signals(false))
	}
	if slices.Contains(Signals(false), os.Signal(syscall.SIGWINCH)) || !slices.Contains(Signals(true), os.Signal(syscall.SIGWINCH)) {
		t.Fatalf("SIGWINCH is for a terminal only: %v / %v", Signals(false), Signals(true))
	}
	f := Catch(false, nil)
	got := make(chan syscall.Signal, 8)
	stopped := make(chan struct{})
	go func() {
		f.Relay(nil, func(s syscall.Signal) { got <- s }, func(rows, cols uint16) { t.Error("a resize without a terminal") })
		close(stopped)
	}()
	for _, s := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGHUP, syscall.SIGTERM} {
		syscall.Kill(os.Getpid(), s)
		select {
		case r := <-got:
			if r != s {
				t.Errorf("sent %v, relayed %v", s, r)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%v was not relayed", s)
		}
	}
	f.Stop()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Relay did not return after Stop")
	}
}

// TestRelayStops: Relay returns when its stop channel closes, and the
// signals stay caught until Stop.
func TestRelayStops(t *testing.T) {
	f := Catch(false, nil)
	defer f.Stop()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { f.Relay(stop, func(syscall.Signal) {}, func(uint16, uint16) {}); close(done) }()
	close(stop)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Relay did not return when stop closed")
	}
	syscall.Kill(os.Getpid(), syscall.SIGUSR1) // caught, not fatal
}
