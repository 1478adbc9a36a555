package changeset

import (
	"context"
	"runtime"
	"sync"
)

// workerCount is how many files are read at a time.
func workerCount(n int) int {
	return max(1, min(n, 4*runtime.GOMAXPROCS(0), 16))
}

// runOrdered calls work for 0..n-1 on a few goroutines, each with its own
// scratch memory, and emit with the results in order, keeping only a
// window of results in memory. It stops at the first error of emit or of
// ctx. Work is handed out in chunks of consecutive items: one hand-off per
// file would cost more than reading a small file.
func runOrdered[R any](ctx context.Context, n int, work func(s *scratch, i int) R, emit func(i int, r R) error) error {
	if n == 0 {
		return ctx.Err()
	}
	workers := workerCount(n)
	if workers == 1 {
		var s scratch
		defer s.release()
		for i := range n {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := emit(i, work(&s, i)); err != nil {
				return err
			}
		}
		return nil
	}
	chunk := min(max(n/(workers*16), 1), 32)
	chunks := (n + chunk - 1) / chunk
	window := workers * 4 // chunks in flight; their results live in a ring
	var (
		mu    sync.Mutex
		cond  = sync.NewCond(&mu)
		res   = make([]R, window*chunk)
		ready = make([]bool, window)
		sem   = make(chan struct{}, window)
		jobs  = make(chan int, window)
		stop  = make(chan struct{})
		wg    sync.WaitGroup
	)
	go func() {
		defer close(jobs)
		for c := range chunks {
			select {
			case sem <- struct{}{}:
			case <-stop:
				return
			}
			jobs <- c // never blocks: at most window chunks are out
		}
	}()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s scratch
			defer s.release()
			for c := range jobs {
				k := c % window
				for i := c * chunk; i < min(n, (c+1)*chunk); i++ {
					res[k*chunk+i-c*chunk] = work(&s, i)
				}
				mu.Lock()
				ready[k] = true
				cond.Broadcast()
				mu.Unlock()
			}
		}()
	}
	var err error
	for c := 0; c < chunks && err == nil; c++ {
		k := c % window
		mu.Lock()
		for !ready[k] {
			cond.Wait()
		}
		ready[k] = false
		mu.Unlock()
		for i := c * chunk; i < min(n, (c+1)*chunk); i++ {
			r := &res[k*chunk+i-c*chunk]
			if err == nil {
				if err = ctx.Err(); err == nil {
					err = emit(i, *r)
				}
			}
			var zero R
			*r = zero
		}
		<-sem
	}
	close(stop) // the feeder stops, closes jobs, and the workers end
	wg.Wait()
	return err
}
