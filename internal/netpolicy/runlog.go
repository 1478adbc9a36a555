package netpolicy

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"
)

// keepRuns is how many runs' violation logs the store keeps.
const keepRuns = 50

// RunLog writes a run's violations as JSON lines to
// <store>/runs/<run>/violations.jsonl, creating it at the first one, and
// keeps the newest runs' logs only. The supervisor writes it, or the
// helper once the supervisor handed off (Report).
type RunLog struct {
	mu   sync.Mutex
	path string
	f    *os.File
	err  error
}

// NewRunLog returns the log of a new run in store (nil without a store).
func NewRunLog(store string) *RunLog {
	if store == "" {
		return nil
	}
	run := time.Now().UTC().Format("20060102T150405.000000") + "-" + strconv.Itoa(os.Getpid())
	return &RunLog{path: filepath.Join(store, "runs", run, "violations.jsonl")}
}

// OpenRunLog returns the log at path, a run's violations.jsonl.
func OpenRunLog(path string) (*RunLog, error) {
	if !filepath.IsAbs(path) || filepath.Base(path) != "violations.jsonl" {
		return nil, fmt.Errorf("not a run's violation log: %q", path)
	}
	return &RunLog{path: filepath.Clean(path)}, nil
}

// Path is where the log is (or will be) written.
func (l *RunLog) Path() string {
	if l == nil {
		return ""
	}
	return l.path
}

func (l *RunLog) Write(b []byte) (int, error) {
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

// Close closes the file.
func (l *RunLog) Close() {
	if l == nil {
		return
	}
	l.mu.Lock()
	if l.f != nil {
		l.f.Close()
	}
	l.mu.Unlock()
}

// Written returns the log's path once something was written to it.
func (l *RunLog) Written() string {
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
