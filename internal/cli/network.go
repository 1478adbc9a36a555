package cli

import (
	"github.com/pinfold/pinfold/internal/netpolicy"
	"github.com/pinfold/pinfold/sandbox"
)

// summarizeViolations tells the user what the network policy blocked.
func summarizeViolations(io *IO, vs []sandbox.Violation, logPath string) {
	nv := make([]netpolicy.Violation, len(vs))
	for i, v := range vs {
		nv[i] = netpolicy.Violation(v)
	}
	netpolicy.Summarize(io.Stderr, nv, logPath)
}
