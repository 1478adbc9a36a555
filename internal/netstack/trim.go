package netstack

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
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

// Threads: each built stack's device reader (fdbased) blocks a thread in
// ppoll, and Go never ends a thread it made: after a hundred sandboxes at
// once the helper kept a hundred idle threads, each with its 48 KiB of
// system stacks. So the trim also ends the threads beyond those the
// attached stacks block and a few for the runtime: a goroutine locked to
// its thread that exits takes the thread with it. If it takes a thread
// that was still wanted, the runtime makes another.
var attached atomic.Int64

// stopped says a stack was closed since the last trim: its state is
// garbage, and its reader's thread idle, however little it allocated.
var stopped atomic.Bool

// spareThreads is how many threads beyond the attached stacks' stay.
const spareThreads = 6

// shedThreads ends idle threads beyond spareThreads.
func shedThreads() {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return
	}
	for range len(ents) - int(attached.Load()) - spareThreads {
		done := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(done)
		}()
		<-done
	}
}

// trim collects, returns the free pages to the kernel and ends the idle
// threads.
func trim() {
	stopped.Store(false)
	runtime.GC()
	debug.FreeOSMemory()
	shedThreads()
}

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
		if now-last < quietBytes && (now-trimmed >= trimAfter || stopped.Load()) {
			trim()
			now = allocs()
			trimmed = now
		}
		last = now
	}
}
