package cli

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"

	"github.com/pinfold/pinfold/sandbox"
	"golang.org/x/sys/unix"
)

// tracer prints a timeline of a run when PINFOLD_TRACE is set: pinfold's
// own steps and the sandbox init's, on one clock. PINFOLD_TRACE may hold
// the CLOCK_MONOTONIC time (ns) at which the caller started pinfold, so
// that the timeline includes pinfold's own start-up (bench/ sets it).
type tracer struct {
	start  int64
	points []sandbox.TracePoint
}

func newTracer() *tracer {
	v, ok := os.LookupEnv("PINFOLD_TRACE")
	if !ok {
		return nil
	}
	t := &tracer{}
	// "1" or "yes" just turn tracing on; a clock reading is a start time.
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 1e9 {
		t.start = n
	}
	return t
}

func monotonic() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

func (t *tracer) mark(step string) {
	if t != nil {
		t.points = append(t.points, sandbox.TracePoint{Step: step, Mono: monotonic()})
	}
}

func (t *tracer) print(w io.Writer, r *sandbox.Result) {
	all := append(t.points, r.Trace...)
	sort.SliceStable(all, func(i, j int) bool { return all[i].Mono < all[j].Mono })
	base := t.start
	if base == 0 && len(all) > 0 {
		base = all[0].Mono
	}
	for _, p := range all {
		fmt.Fprintf(w, "trace %8.3f ms  %s\n", float64(p.Mono-base)/1e6, p.Step)
	}
}
