package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

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
	cols  int // the terminal's width

	// The live lines (a terminal only): the operations shown, in the
	// order they started, how many lines are on the screen, and the
	// redrawing goroutine's stop, closed (under mu) when they go.
	shown []string
	drawn int
	stop  chan struct{}
}

// op is one long operation in progress.
type op struct {
	name  string
	step  *engine.Step
	phase string // the last phase printed, without a terminal
	log   *os.File
}

func newReporter(w *os.File, store string) *reporter {
	// A terminal without a size (some ptys) cannot show a live line.
	ws, err := unix.IoctlGetWinsize(int(w.Fd()), unix.TIOCGWINSZ)
	r := &reporter{w: w, tty: err == nil && ws.Col > 0, ops: map[string]*op{}}
	if r.tty {
		r.cols = int(ws.Col)
	}
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
	if r.stop == nil {
		return
	}
	close(r.stop)
	r.stop = nil
	r.shown = nil
	r.draw(0)
}

// liveRefresh is how often the live lines are redrawn.
const liveRefresh = 120 * time.Millisecond

// spinner is the live lines' turning mark, one frame a refresh.
const spinner = `|/-\`

// draw replaces the live lines on the screen with the operations in
// r.shown (none: it clears them). Called with r.mu held. A line never
// reaches the terminal's last column, so none wraps and the cursor goes
// back up exactly as many lines as were drawn.
func (r *reporter) draw(frame int) {
	var b strings.Builder
	if r.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", r.drawn)
	}
	b.WriteString("\r\x1b[J")
	for _, name := range r.shown {
		l := "pinfold: " + name + " " + string(spinner[frame%len(spinner)]) + " " + stepText(r.ops[name].step)
		if len(l) > r.cols-1 {
			l = strings.ToValidUTF8(l[:max(0, r.cols-1)], "") // a rune cut in two goes
		}
		b.WriteString(l + "\n")
	}
	r.drawn = len(r.shown)
	io.WriteString(r.w, b.String())
}

// redraw turns the spinners until stop is closed.
func (r *reporter) redraw(stop chan struct{}) {
	t := time.NewTicker(liveRefresh)
	defer t.Stop()
	for frame := 1; ; frame++ {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		r.mu.Lock()
		select {
		case <-stop: // the lines went while this waited for mu
		default:
			r.draw(frame)
		}
		r.mu.Unlock()
	}
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
	o.step = &s
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
	if !slices.Contains(r.shown, name) {
		r.shown = append(r.shown, name)
		if r.stop == nil {
			r.stop = make(chan struct{})
			go r.redraw(r.stop)
		}
		r.draw(0)
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
	r.shown = slices.DeleteFunc(r.shown, func(n string) bool { return n == name })
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
