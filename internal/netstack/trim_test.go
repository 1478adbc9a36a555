package netstack

import (
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
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
