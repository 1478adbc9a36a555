package remote

import (
	"os"
	"syscall"
)

// caught are the signals pinfold outlives while the helper runs: Ctrl-C
// and a closed console reach every process of the console, the helper
// too, which forwards them to the remote command.
var caught = []os.Signal{os.Interrupt, syscall.SIGTERM}

// forwarded is false: Windows can only kill a process, not signal it.
func forwarded(os.Signal) bool { return false }
