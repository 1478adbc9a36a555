//go:build !linux

package apihelper

import (
	"fmt"
	"os"

	"github.com/pinfold/pinfold/internal/remote"
)

// mcpMain refuses: the tools run sandboxes, which need Linux. An agent
// on macOS or Windows reaches a Linux server's /mcp over HTTP instead.
func mcpMain([]string) int {
	err := remote.NeedsLinux("mcp")
	fmt.Fprintf(os.Stderr, "pinfold: %s\n", err.Error())
	return err.Exit
}
