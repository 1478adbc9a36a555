package kubehelper

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestWhenStarted: an exec refused because the pod's container does not
// run yet is tried again until it runs; another error, or the pod's
// failing to start, ends the tries.
func TestWhenStarted(t *testing.T) {
	s := &session{starting: newPodStart(1)}
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
	// Once the pod was reported running, a try's "not found" is final:
	// its command may have run before its container died.
	s.starting = newPodStart(1)
	close(s.starting.done)
	n = 0
	s.whenStarted(context.Background(), func() error { n++; return errors.New(`container not found ("main")`) })
	if n != 1 {
		t.Errorf("an exec begun after the pod ran was tried %d times", n)
	}
	// A claimed pod (no start followed) runs: its errors are final.
	s.starting = nil
	n = 0
	s.whenStarted(context.Background(), func() error { n++; return errors.New("container not found") })
	if n != 1 {
		t.Errorf("a running pod's exec was tried %d times", n)
	}
}

// TestOneProbe: while the pod starts, the tries of several execs do not
// run side by side (each refused one is a look at the container runtime,
// which slows the container's start); once an exec has run (its stdin
// read), the others try at once.
func TestOneProbe(t *testing.T) {
	s := &session{starting: newPodStart(1)}
	var mu sync.Mutex
	inside, most, tries := 0, 0, 0
	ready := make(chan struct{})
	try := func() error {
		mu.Lock()
		inside++
		tries++
		most = max(most, inside)
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		inside--
		mu.Unlock()
		select {
		case <-ready:
			return nil
		default:
			return errors.New(`unable to upgrade connection: container not found ("main")`)
		}
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := s.whenStarted(context.Background(), try); err != nil {
				t.Error(err)
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	if most != 1 {
		t.Errorf("%d tries at once while the pod started", most)
	}
	before := tries
	mu.Unlock()
	close(ready)
	// An exec's stdin read: the container runs.
	r := &firstRead{r: strings.NewReader("x"), f: s.execRan}
	io.ReadAll(r)
	wg.Wait()
	if tries-before > 8 {
		t.Errorf("%d tries after the container ran", tries-before)
	}
}

// TestSignallerNeverStalls: a signal goes to the shell's stdin only while
// something reads it, within sendWait; a stdin nobody reads (the shell was
// killed, the stream stopped) makes send fall back at once, and never
// blocks the goroutine that marks the shell dead (it used to hold the
// lock across a blocking pipe write).
func TestSignallerNeverStalls(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := &signaller{ch: make(chan []byte), ready: true}
	r := &signalReader{ch: g.ch, done: ctx.Done()}
	got := make(chan string, 1)
	go func() {
		b := make([]byte, 1)
		var line []byte
		for {
			if _, err := r.Read(b); err != nil {
				return
			}
			if line = append(line, b[0]); b[0] == '\n' {
				got <- string(line)
				return
			}
		}
	}()
	if !g.send(10) {
		t.Fatal("a signal was not taken by a reading stdin")
	}
	if l := <-got; l != "10\n" {
		t.Fatalf("the shell read %q, want 10", l)
	}
	// Nobody reads now.
	start := time.Now()
	if g.send(15) {
		t.Fatal("send said a signal was taken that nobody read")
	}
	if d := time.Since(start); d > 5*sendWait {
		t.Errorf("send waited %v for a stdin nobody reads", d)
	}
	// Marking the shell dead is not held up by a send in progress.
	pending := make(chan bool, 1)
	go func() { pending <- g.send(2) }()
	marked := make(chan struct{})
	go func() {
		g.mu.Lock()
		g.dead = true
		g.mu.Unlock()
		close(marked)
	}()
	select {
	case <-marked:
	case <-time.After(10 * time.Second):
		t.Fatal("marking the shell dead waited on a send")
	}
	if g.send(2) {
		t.Error("a dead shell took a signal")
	}
	if <-pending {
		t.Error("send said a signal was taken that nobody read")
	}
	// Its context ended, the reader ends.
	cancel()
	if _, err := r.Read(make([]byte, 8)); err != io.EOF {
		t.Errorf("read after the context ended: %v, want EOF", err)
	}
}
