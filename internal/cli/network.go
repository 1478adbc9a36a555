package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/sandbox"
)

// keepRuns is how many runs' violation logs the store keeps.
const keepRuns = 50

// usesStack reports whether the plan's network goes through pinfold's
// userspace stack (which lives in this process for the whole run).
func usesStack(p *plan.Plan) bool {
	sp := &p.Sandbox
	return sp.Network == sandbox.NetworkOutbound || sp.Network == sandbox.NetworkAllow ||
		sp.Network == sandbox.NetworkNone && len(sp.Net.Publish) > 0
}

// violationLog writes the run's violations as JSON lines to
// <store>/runs/<run>/violations.jsonl, creating it at the first one.
type violationLog struct {
	mu   sync.Mutex
	path string
	f    *os.File
	err  error
}

func newViolationLog() *violationLog {
	dir, err := storeDir()
	if err != nil {
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

// maxSummary is how many violations the summary on stderr lists.
const maxSummary = 10

// summarizeViolations tells the user what the network policy blocked.
func summarizeViolations(io *IO, vs []sandbox.Violation, logPath string) {
	if len(vs) == 0 {
		return
	}
	total := 0
	for _, v := range vs {
		total += v.Count
	}
	where := ""
	if logPath != "" {
		where = " (log: " + logPath + ")"
	}
	noun := "attempts"
	if total == 1 {
		noun = "attempt"
	}
	fmt.Fprintf(io.Stderr, "pinfold: the network policy blocked %d %s%s:\n", total, noun, where)
	for i, v := range vs {
		if i == maxSummary {
			fmt.Fprintf(io.Stderr, "  ... and %d more\n", len(vs)-maxSummary)
			break
		}
		var b strings.Builder
		fmt.Fprintf(&b, "  %-4s %s: %s", v.Kind, v.What(), v.Reason)
		if v.Rule != "" {
			fmt.Fprintf(&b, " (rule %q)", v.Rule)
		}
		if v.Count > 1 {
			fmt.Fprintf(&b, " x%d", v.Count)
		}
		fmt.Fprintln(io.Stderr, b.String())
	}
}
