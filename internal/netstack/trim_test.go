package netstack

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Once the allocations stop, the heap they grew goes back to the kernel
// within a few ticks, not at the next collection minutes later.
func TestTrimReturnsTheHeapWhenQuiet(t *testing.T) {
	s := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}}
	retained := func() uint64 {
		metrics.Read(s)
		return s[0].Value.Uint64() + s[1].Value.Uint64()
	}
	debug.FreeOSMemory() // the garbage of the tests before
	base := retained()
	stop := make(chan struct{})
	defer close(stop)
	go trimWhenQuiet(stop)
	var keep [][]byte
	for range 256 { // 64 MiB, then garbage
		keep = append(keep, make([]byte, 256<<10))
	}
	keep[0][0] = 1
	keep = nil
	if r := retained(); r < base+32<<20 {
		t.Fatalf("the heap holds %d bytes after allocating 64 MiB, %d before", r, base)
	}
	deadline := time.Now().Add(6 * trimTick)
	for time.Now().Before(deadline) {
		time.Sleep(trimTick / 4)
		if r := retained(); r < base+8<<20 {
			return
		}
	}
	t.Fatalf("the heap still holds %d bytes (%d before) %v after the allocations stopped", retained(), base, 6*trimTick)
}

// Threads made for blocking calls that have ended are shed by the trim.
func TestShedThreads(t *testing.T) {
	tasks := func() int {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	before := tasks()
	// 24 goroutines blocked in a system call at once need a thread each.
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	done := make(chan struct{})
	for range 24 {
		go func() {
			unix.Poll([]unix.PollFd{{Fd: int32(p[0]), Events: unix.POLLIN}}, 300)
			done <- struct{}{}
		}()
	}
	for range 24 {
		<-done
	}
	if n := tasks(); n < before+16 {
		t.Skipf("only %d threads after 24 blocking calls (%d before): nothing to shed", n, before)
	}
	shedThreads()
	// A thread ends just after its goroutine: give the last a moment.
	want := spareThreads + int(attached.Load()) + 2
	for end := time.Now().Add(2 * time.Second); tasks() > want && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := tasks(); n > want {
		t.Fatalf("%d threads after shedding, want at most %d", n, want)
	}
}
