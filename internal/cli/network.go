package cli

import (
	"github.com/pinfold/pinfold/internal/netpolicy"
	"github.com/pinfold/pinfold/sandbox"
)

// summarizeViolations tells the user what the network policy blocked.
func summarizeViolations(io *IO, vs []sandbox.Violation, logPath string) {
	netpolicy.Summarize(io.Stderr, vs, logPath)
}
