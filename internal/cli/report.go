package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// reporter prints what the engine does besides the command on stderr:
// notices as "pinfold: ..." lines, a long operation's steps on one
// rewritten line when stderr is a terminal (one line per phase when it is
// not), and the output of the tools it runs indented under pinfold's.
type reporter struct {
	mu   sync.Mutex
	w    io.Writer
	tty  bool
	last map[string]string // the phase each operation last printed
	live bool              // a progress line is on screen
}

func newReporter(w *os.File) *reporter {
	_, err := unix.IoctlGetTermios(int(w.Fd()), unix.TCGETS)
	return &reporter{w: w, tty: err == nil, last: map[string]string{}}
}

func (r *reporter) clear() {
	if r.live {
		fmt.Fprint(r.w, "\r\033[K")
		r.live = false
	}
}

func (r *reporter) Notice(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clear()
	fmt.Fprintf(r.w, "pinfold: %s\n", msg)
}

func (r *reporter) Progress(op, step string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	name := op
	if _, n, ok := strings.Cut(op, " "); ok {
		name = n
	}
	if r.tty {
		if len(step) > 70 {
			step = step[:70]
		}
		fmt.Fprintf(r.w, "\r\033[Kpinfold: %s: %s", name, step)
		r.live = true
		return
	}
	verb, _, _ := strings.Cut(step, " ")
	if verb != r.last[op] { // one line per phase when nobody watches
		fmt.Fprintf(r.w, "pinfold: %s: %s\n", name, step)
		r.last[op] = verb
	}
}

func (r *reporter) Done(op string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clear()
	delete(r.last, op)
}

func (r *reporter) Output(op string) io.Writer {
	return &prefixWriter{r: r, prefix: "  | "}
}

// prefixWriter indents a tool's output under pinfold's.
type prefixWriter struct {
	r      *reporter
	prefix string
	mid    bool
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.r.mu.Lock()
	defer p.r.mu.Unlock()
	p.r.clear()
	w := p.r.w
	n := len(b)
	for len(b) > 0 {
		if !p.mid {
			io.WriteString(w, p.prefix)
			p.mid = true
		}
		i := strings.IndexByte(string(b), '\n')
		if i < 0 {
			w.Write(b)
			break
		}
		w.Write(b[:i+1])
		b = b[i+1:]
		p.mid = false
	}
	return n, nil
}
