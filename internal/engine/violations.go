package engine

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"
)

// keepRuns is how many runs' violation logs the store keeps.
const keepRuns = 50

// violationLog writes the run's violations as JSON lines to
// <store>/runs/<run>/violations.jsonl, creating it at the first one.
type violationLog struct {
	mu   sync.Mutex
	path string
	f    *os.File
	err  error
}

func newViolationLog(dir string) *violationLog {
	if dir == "" {
		return nil
	}
	run := time.Now().UTC().Format("20060102T150405.000000") + "-" + strconv.Itoa(os.Getpid())
	return &violationLog{path: filepath.Join(dir, "runs", run, "violations.jsonl")}
}

func (l *violationLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil && l.err == nil {
		runs := filepath.Dir(filepath.Dir(l.path))
		if l.err = os.MkdirAll(filepath.Dir(l.path), 0o700); l.err == nil {
			l.f, l.err = os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
			pruneRuns(runs)
		}
	}
	if l.err != nil {
		return 0, l.err
	}
	return l.f.Write(b)
}

func (l *violationLog) close() {
	if l == nil {
		return
	}
	l.mu.Lock()
	if l.f != nil {
		l.f.Close()
	}
	l.mu.Unlock()
}

// written returns the log's path once something was written to it.
func (l *violationLog) written() string {
	if l == nil {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return ""
	}
	return l.path
}

// pruneRuns keeps the newest keepRuns run directories (their names sort by
// time).
func pruneRuns(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) <= keepRuns {
		return
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, n := range names[:len(names)-keepRuns] {
		os.RemoveAll(filepath.Join(dir, n))
	}
}
