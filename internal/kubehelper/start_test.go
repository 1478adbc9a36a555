package kubehelper

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestWhenStarted: an exec refused because the pod's container does not
// run yet is tried again until it runs; another error, or the pod's
// failing to start, ends the tries.
func TestWhenStarted(t *testing.T) {
	s := &session{starting: &podStart{done: make(chan struct{})}}
	n := 0
	err := s.whenStarted(context.Background(), func() error {
		if n++; n < 3 {
			return errors.New(`unable to upgrade connection: container not found ("main")`)
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Errorf("not started twice, then started: %v after %d tries", err, n)
	}
	n = 0
	other := errors.New("permission denied")
	if err := s.whenStarted(context.Background(), func() error { n++; return other }); err != other || n != 1 {
		t.Errorf("another error is final: %v after %d tries", err, n)
	}
	failed := errors.New("pod p: container main cannot start: ErrImageNeverPull")
	time.AfterFunc(100*time.Millisecond, func() { s.starting.err = failed; close(s.starting.done) })
	err = s.whenStarted(context.Background(), func() error { return errors.New("websocket: bad handshake (404 Not Found): pod does not exist") })
	if err != failed {
		t.Errorf("a pod that never runs: %v", err)
	}
	// A claimed pod (no start followed) runs: its errors are final.
	s.starting = nil
	n = 0
	s.whenStarted(context.Background(), func() error { n++; return errors.New("container not found") })
	if n != 1 {
		t.Errorf("a running pod's exec was tried %d times", n)
	}
}
