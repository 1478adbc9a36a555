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
// ctx.
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
	var (
		mu    sync.Mutex
		cond  = sync.NewCond(&mu)
		res   = make([]R, n)
		ready = make([]bool, n)
		sem   = make(chan struct{}, workers*8)
		jobs  = make(chan int)
		stop  = make(chan struct{})
		wg    sync.WaitGroup
	)
	go func() {
		defer close(jobs)
		for i := range n {
			select {
			case sem <- struct{}{}:
			case <-stop:
				return
			}
			select {
			case jobs <- i:
			case <-stop:
				return
			}
		}
	}()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s scratch
			defer s.release()
			for i := range jobs {
				r := work(&s, i)
				mu.Lock()
				res[i], ready[i] = r, true
				cond.Signal()
				mu.Unlock()
			}
		}()
	}
	var err error
	for i := range n {
		mu.Lock()
		for !ready[i] {
			cond.Wait()
		}
		r := res[i]
		var zero R
		res[i] = zero
		mu.Unlock()
		<-sem
		if err = ctx.Err(); err != nil {
			break
		}
		if err = emit(i, r); err != nil {
			break
		}
	}
	close(stop) // the feeder stops, closes jobs, and the workers end
	wg.Wait()
	return err
}
