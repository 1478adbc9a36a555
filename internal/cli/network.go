package cli

import (
	"fmt"
	"strings"

	"github.com/pinfold/pinfold/sandbox"
)

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
