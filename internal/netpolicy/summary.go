package netpolicy

import (
	"fmt"
	"io"
	"strings"
)

// maxSummary is how many violations the summary lists.
const maxSummary = 10

// Summarize tells the user what the policy blocked (nothing when vs is
// empty), naming the run's log when there is one. The CLI prints it after
// a run, the helper after a run that handed off (Report).
func Summarize(w io.Writer, vs []Violation, logPath string) {
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
	var b strings.Builder
	fmt.Fprintf(&b, "pinfold: the network policy blocked %d %s%s:\n", total, noun, where)
	for i, v := range vs {
		if i == maxSummary {
			fmt.Fprintf(&b, "  ... and %d more\n", len(vs)-maxSummary)
			break
		}
		fmt.Fprintf(&b, "  %-4s %s: %s", v.Kind, v.What(), v.Reason)
		if v.Rule != "" {
			fmt.Fprintf(&b, " (rule %q)", v.Rule)
		}
		if v.Count > 1 {
			fmt.Fprintf(&b, " x%d", v.Count)
		}
		b.WriteByte('\n')
	}
	io.WriteString(w, b.String())
}
