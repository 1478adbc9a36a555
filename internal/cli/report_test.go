package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/pinfold/pinfold/internal/engine"
)

// drive runs a build-like sequence through a reporter.
func drive(r *reporter, fail bool) {
	r.Notice("building x")
	log := r.Output("base x")
	for i := 1; i <= 6; i++ {
		fmt.Fprintf(log, "raw line %d\n", i)
		phase := "Retrieving"
		if i > 3 {
			phase = "Unpacking"
		}
		r.Progress("base x", engine.Step{Phase: phase, Item: fmt.Sprintf("pkg%d", i), Done: int64(i)})
		time.Sleep(60 * time.Millisecond)
	}
	var err error
	if fail {
		err = errors.New("boom")
	}
	r.Done("base x", err)
	r.Notice("done")
}

func TestReporterOnATerminal(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skip("no pty:", err)
	}
	defer ptmx.Close()
	pty.Setsize(ptmx, &pty.Winsize{Rows: 30, Cols: 100})
	var out bytes.Buffer
	copied := make(chan struct{})
	go func() { io.Copy(&out, ptmx); close(copied) }()
	r := newReporter(tty, t.TempDir())
	if !r.tty {
		t.Fatal("a sized pty is not taken for a terminal")
	}
	drive(r, false)
	tty.Close()
	<-copied
	got := strings.ReplaceAll(out.String(), "\r", "")
	for _, w := range []string{"pinfold: building x\n", "its tools' output goes to", "Retrieving (", "Unpacking (", "pinfold: done\n"} {
		if !strings.Contains(got, w) {
			t.Errorf("terminal output lacks %q: %q", w, got)
		}
	}
	if strings.Contains(got, "raw line") {
		t.Errorf("the tools' output reached the terminal: %q", got)
	}
}

func TestReporterPlainAndFailure(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	r := newReporter(f, t.TempDir())
	drive(r, true)
	b, _ := os.ReadFile(f.Name())
	got := string(b)
	// One line per phase, no escape sequences, and the log's tail on failure.
	for _, w := range []string{"pinfold: base x: Retrieving pkg1\n", "pinfold: base x: Unpacking pkg4\n",
		"failed; the last lines of its log", "  | raw line 6\n"} {
		if !strings.Contains(got, w) {
			t.Errorf("output lacks %q: %q", w, got)
		}
	}
	if strings.Count(got, "Retrieving") != 1 || strings.Contains(got, "\x1b[") {
		t.Errorf("not one plain line per phase: %q", got)
	}
}

func TestReporterQuiet(t *testing.T) {
	f, _ := os.CreateTemp(t.TempDir(), "stderr")
	r := newReporter(f, t.TempDir())
	r.quiet = true
	drive(r, false)
	if b, _ := os.ReadFile(f.Name()); len(b) != 0 {
		t.Errorf("--quiet printed %q", b)
	}
	f2, _ := os.CreateTemp(t.TempDir(), "stderr")
	r = newReporter(f2, t.TempDir())
	r.quiet = true
	drive(r, true)
	if b, _ := os.ReadFile(f2.Name()); !strings.Contains(string(b), "raw line 6") {
		t.Errorf("--quiet hid a failure's log: %q", b)
	}
}

// TestLiveLinesRedraw: each redraw goes back over the lines drawn before
// and clears them, no line reaches the terminal's last column (one that
// wrapped would leave the cursor a line short), and the lines go when the
// last operation ends.
func TestLiveLinesRedraw(t *testing.T) {
	var out bytes.Buffer
	r := &reporter{w: &out, tty: true, cols: 24, ops: map[string]*op{}}
	r.Progress("base x", engine.Step{Phase: "Retrieving", Item: "a-rather-long-package-name", Done: 1})
	r.Progress("image y", engine.Step{Phase: "Pulling", Done: 2})
	r.mu.Lock()
	r.draw(1)
	r.mu.Unlock()
	r.Done("base x", nil)
	r.Done("image y", nil)
	got := out.String()
	if !strings.Contains(got, "\x1b[2A\r\x1b[J") {
		t.Errorf("a redraw of two lines does not go back over both: %q", got)
	}
	for _, l := range strings.Split(got, "\n") {
		if i := strings.LastIndex(l, "\x1b[J"); i >= 0 {
			l = l[i+3:]
		}
		if len(l) >= 24 {
			t.Errorf("line %q reaches the terminal's last column", l)
		}
	}
	if !strings.HasSuffix(got, "\x1b[2A\r\x1b[J") || r.stop != nil {
		t.Errorf("the lines stayed after the operations ended: %q", got)
	}
}
