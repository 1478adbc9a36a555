package netstack

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Trimming: a download through the stack allocates its segments' buffers
// by the megabyte; once it ends they are garbage, and the Go runtime
// keeps the heap they grew for minutes (it collects only when more is
// allocated, at the latest every two minutes, and then returns the pages
// slowly). A shared helper would hold tens of megabytes for sandboxes
// long idle or gone. So, once the helper has been quiet for a tick after
// allocating, it collects twice (the buffer pools keep their chunks
// through one collection) and hands the free pages back to the kernel.
const (
	trimTick = time.Second
	// quietBytes: allocating less than this in a tick is quiet.
	quietBytes = 256 << 10
	// trimAfter: a trim is worth it once this much was allocated since
	// the last.
	trimAfter = 1 << 20
)

// trimWhenQuiet runs the trimming loop until stop closes.
func trimWhenQuiet(stop <-chan struct{}) {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	allocs := func() uint64 {
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	t := time.NewTicker(trimTick)
	defer t.Stop()
	last := allocs()
	trimmed := last
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		now := allocs()
		if now-last < quietBytes && now-trimmed >= trimAfter {
			runtime.GC()
			debug.FreeOSMemory()
			now = allocs()
			trimmed = now
		}
		last = now
	}
}
