//go:build !windows

package remote

import (
	"os"
	"syscall"
)

// caught are the signals pinfold outlives while the helper runs: a
// terminal sends SIGINT and SIGQUIT to both, and the helper forwards them
// to the remote command.
var caught = []os.Signal{syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGHUP}

// forwarded says whether s goes on to the helper: SIGTERM and SIGHUP
// sent to pinfold alone.
func forwarded(s os.Signal) bool { return s == syscall.SIGTERM || s == syscall.SIGHUP }
