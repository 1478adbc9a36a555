package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/internal/engine"
)

// reporter shows what the engine does besides the command, on stderr:
//
//   - notices as "pinfold: ..." lines (none with --quiet);
//   - a long operation (a base or image build, a pull, a pack) as one
//     live line with a spinner, its phase, the item and a count when
//     stderr is a terminal; one line per phase when it is not; nothing
//     with --quiet;
//   - the raw output of the tools it runs (debootstrap, apt) in a log
//     file under the store's logs/, named when the operation starts and
//     whose last lines are shown when it fails.
type reporter struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	quiet bool
	logs  string // directory of the tools' logs; "" keeps none
	ops   map[string]*op
	bars  *mpb.Progress
}

// op is one long operation in progress.
type op struct {
	name  string
	bar   *mpb.Bar
	step  atomic.Pointer[engine.Step] // read by the bar's goroutine
	phase string                      // the last phase printed, without a terminal
	log   *os.File
}

func newReporter(w *os.File, store string) *reporter {
	// A terminal without a size (some ptys) cannot show a live line.
	ws, err := unix.IoctlGetWinsize(int(w.Fd()), unix.TIOCGWINSZ)
	r := &reporter{w: w, tty: err == nil && ws.Col > 0, ops: map[string]*op{}}
	if store != "" {
		r.logs = filepath.Join(store, "logs")
	}
	return r
}

// keepLogs is how many tool logs the store keeps.
const keepLogs = 20

// Notice prints a line, once the live lines are out of the way.
func (r *reporter) Notice(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.quiet {
		return
	}
	r.stopBars()
	fmt.Fprintf(r.w, "pinfold: %s\n", msg)
}

// stopBars ends the live display; a later step starts it again.
func (r *reporter) stopBars() {
	if r.bars == nil {
		return
	}
	for _, o := range r.ops {
		if o.bar != nil {
			o.bar.Abort(true)
			o.bar = nil
		}
	}
	r.bars.Wait()
	r.bars = nil
}

func (r *reporter) get(name string) *op {
	o := r.ops[name]
	if o == nil {
		o = &op{name: name}
		r.ops[name] = o
	}
	return o
}

// Progress shows a step of a long operation.
func (r *reporter) Progress(name string, s engine.Step) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.get(name)
	o.step.Store(&s)
	if r.quiet {
		return
	}
	if !r.tty {
		if s.Phase != o.phase { // one line per phase when nobody watches
			fmt.Fprintf(r.w, "pinfold: %s: %s %s\n", name, s.Phase, s.Item)
			o.phase = s.Phase
		}
		return
	}
	if o.bar == nil {
		if r.bars == nil {
			r.bars = mpb.New(mpb.WithOutput(r.w), mpb.WithWidth(1), mpb.WithRefreshRate(120*time.Millisecond))
		}
		o.bar = r.bars.New(0, mpb.SpinnerStyle(),
			mpb.BarFillerClearOnComplete(),
			mpb.PrependDecorators(decor.Name("pinfold: "+name+" ")),
			mpb.AppendDecorators(decor.Any(func(decor.Statistics) string { return stepText(o.step.Load()) })))
	}
	// Without a total the spinner turns on its own (a current past the
	// total would complete the bar); the count is in the text.
	if s.Total > 0 {
		o.bar.SetTotal(s.Total, false)
		o.bar.SetCurrent(s.Done)
	}
}

// stepText is the live line's text: phase, count and item.
func stepText(s *engine.Step) string {
	if s == nil {
		return ""
	}
	count := fmt.Sprint(s.Done)
	switch {
	case s.Bytes && s.Total > 0:
		count = fmt.Sprintf("%s/%s", size(s.Done), size(s.Total))
	case s.Bytes:
		count = size(s.Done)
	case s.Total > 0:
		count = fmt.Sprintf("%d/%d", s.Done, s.Total)
	}
	t := s.Phase + " (" + count + ") " + s.Item
	if len(t) > 60 {
		t = t[:60]
	}
	return t
}

func size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// Done ends an operation: its live line goes; when it failed, the last
// lines of its log are shown (even with --quiet).
func (r *reporter) Done(name string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.ops[name]
	delete(r.ops, name)
	if o == nil {
		return
	}
	if o.bar != nil {
		o.bar.Abort(true)
		o.bar = nil
	}
	if len(r.ops) == 0 {
		r.stopBars()
	}
	if o.log == nil {
		return
	}
	path := o.log.Name()
	o.log.Close()
	if err == nil {
		return
	}
	if b, rerr := os.ReadFile(path); rerr == nil && len(b) > 0 {
		fmt.Fprintf(r.w, "pinfold: %s failed; the last lines of its log (%s):\n", name, path)
		for _, l := range lastLines(b, 25) {
			fmt.Fprintf(r.w, "  | %s\n", l)
		}
	}
}

// Output is the operation's log file, created and named on first use.
func (r *reporter) Output(name string) io.Writer {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.get(name)
	if o.log != nil {
		return o.log
	}
	if r.logs == "" || os.MkdirAll(r.logs, 0o700) != nil {
		return io.Discard
	}
	slug := strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' {
			return c
		}
		return '-'
	}, strings.ToLower(name))
	f, err := os.OpenFile(filepath.Join(r.logs, time.Now().UTC().Format("20060102T150405")+"-"+slug+".log"),
		os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return io.Discard
	}
	pruneLogs(r.logs)
	o.log = f
	if !r.quiet {
		r.stopBars()
		fmt.Fprintf(r.w, "pinfold: %s: its tools' output goes to %s\n", name, f.Name())
	}
	return f
}

// pruneLogs keeps the newest keepLogs logs (their names sort by time).
func pruneLogs(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) <= keepLogs {
		return
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, n := range names[:len(names)-keepLogs] {
		os.Remove(filepath.Join(dir, n))
	}
}

func lastLines(b []byte, n int) []string {
	lines := strings.Split(strings.TrimRight(string(bytes.ReplaceAll(b, []byte("\r"), nil)), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}
