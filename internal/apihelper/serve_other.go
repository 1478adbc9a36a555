//go:build !linux

package apihelper

import (
	"fmt"
	"os"

	"github.com/pinfold/pinfold/internal/remote"
)

// serve refuses: the server runs sessions in sandboxes, which need Linux.
func serve([]string) int {
	err := remote.NeedsLinux("serve")
	fmt.Fprintf(os.Stderr, "pinfold: %s\n", err.Error())
	return err.Exit
}
