package changeset

// Running an apply's journal: writing it, the progress that lets Recover
// finish an interrupted apply, and the operations done in parallel.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// writeJournal writes the journal durably.
func writeJournal(dir string, j *journal) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("writing the apply journal: %w", err)
	}
	data, err := json.Marshal(j)
	if err != nil {
		return err
	}
	if err := writeFileSync(filepath.Join(dir, journalName), data); err != nil {
		return fmt.Errorf("writing the apply journal: %w", err)
	}
	os.Remove(filepath.Join(dir, progressName))
	return nil
}

// readProgress reads which operations are recorded as done.
func readProgress(path string, n int) []bool {
	done := make([]bool, n)
	data, _ := os.ReadFile(path)
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break // a line cut short
		}
		if k, err := strconv.Atoi(string(data[:i])); err == nil && k >= 0 && k < n {
			done[k] = true
		}
		data = data[i+1:]
	}
	return done
}

// finish removes the journal.
func (a *applier) finish(journalDir string) error {
	if a.progress != nil {
		a.progress.Close()
		a.progress = nil
	}
	os.Remove(filepath.Join(journalDir, progressName))
	// Not synced: should the removal be lost, Recover re-runs idempotent
	// operations, and a sync here would wait for the data of the apply.
	if err := os.Remove(filepath.Join(journalDir, journalName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// run carries out the journal's operations not marked in done.
func (a *applier) run(journalDir string, done []bool) error {
	f, err := os.OpenFile(filepath.Join(journalDir, progressName), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("recording apply progress: %w", err)
	}
	a.progress = f
	ops := a.j.Ops
	var runErr error
	for i := 0; i < len(ops) && runErr == nil; {
		// Files and symlinks are independent of each other: run a stretch
		// of them on several goroutines.
		k := i
		for k < len(ops) && (ops[k].Kind == opFile || ops[k].Kind == opSymlink) {
			k++
		}
		if k-i > 1 {
			runErr = a.parallel(i, k, done)
			i = k
			continue
		}
		if done == nil || !done[i] {
			if err := a.ctx.Err(); err != nil {
				runErr = err
				break
			}
			runErr = a.do(i)
		}
		i++
	}
	if err := a.flushProgress(); runErr == nil {
		runErr = err
	}
	if done != nil {
		// Remove what an interrupted run may have left aside.
		for i := range ops {
			a.removeTemp(i)
		}
	}
	return runErr
}

func (a *applier) parallel(from, to int, done []bool) error {
	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
	}
	failed := func() bool {
		errMu.Lock()
		defer errMu.Unlock()
		return firstErr != nil
	}
	// Stretches of consecutive operations in one directory: one hand-off
	// per small file would cost more than the file, and two threads in
	// one directory wait for each other's locks on it.
	var stretches []int // start of each stretch, then to
	for i := from; i < to; {
		stretches = append(stretches, i)
		dir, _ := splitPath(string(a.j.Ops[i].Path))
		k := i + 1
		for k < to && k-i < 256 && a.j.Ops[k].Root == a.j.Ops[i].Root {
			if d, _ := splitPath(string(a.j.Ops[k].Path)); d != dir {
				break
			}
			k++
		}
		i = k
	}
	stretches = append(stretches, to)
	var next atomic.Int64
	for range min(len(stretches)-1, max(2, runtime.GOMAXPROCS(0))) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := int(next.Add(1)) - 1
				if n >= len(stretches)-1 {
					return
				}
				for i := stretches[n]; i < stretches[n+1]; i++ {
					if err := a.ctx.Err(); err != nil {
						fail(err)
					}
					if failed() {
						return
					}
					if done == nil || !done[i] {
						if err := a.do(i); err != nil {
							fail(err)
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// do carries out operation i and records it as done.
func (a *applier) do(i int) error {
	o := &a.j.Ops[i]
	var err error
	switch o.Kind {
	case opMkdir:
		err = a.mkdir(o)
	case opFile:
		err = a.file(i, o)
	case opSymlink:
		err = a.symlink(i, o)
	case opLink:
		err = a.link(i, o)
	case opRemove, opRmdir:
		err = a.remove(o)
	case opMeta:
		err = a.meta(o)
	default:
		err = fmt.Errorf("unknown operation %q", o.Kind)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", o.Kind, quotePath(join(string(a.j.Roots[o.Root].Lower), string(o.Path))), err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if o.Entry {
		a.applied++
	}
	// Recorded in batches: operations are idempotent, so losing the last
	// batch to a kill only means doing them again.
	a.progBuf = append(strconv.AppendInt(a.progBuf, int64(i), 10), '\n')
	if len(a.progBuf) >= 4096 {
		return a.flushProgress()
	}
	return nil
}

// flushProgress writes the batched progress records; a.mu is held or
// no operation runs.
func (a *applier) flushProgress() error {
	if len(a.progBuf) == 0 || a.progress == nil {
		return nil
	}
	_, err := a.progress.Write(a.progBuf)
	a.progBuf = a.progBuf[:0]
	if err != nil {
		return fmt.Errorf("recording apply progress: %w", err)
	}
	return nil
}

func (a *applier) tmpName(i int) string { return a.j.Tmp + strconv.Itoa(i) }

// removeTemp removes operation i's temporary name if it is there.
func (a *applier) removeTemp(i int) {
	o := &a.j.Ops[i]
	if o.Kind != opFile && o.Kind != opSymlink && o.Kind != opLink {
		return
	}
	parent, _ := splitPath(string(o.Path))
	pfd, release, err := a.dir(o.Root, parent, false, nil)
	if err != nil {
		return
	}
	defer release()
	unix.Unlinkat(pfd, a.tmpName(i), 0)
}
