//go:build !linux

package main

import (
	"context"
	"os"

	"github.com/pinfold/pinfold/internal/remote"
)

// run is the client of a pinfold server: sandboxes need Linux.
func run(args []string) int {
	return remote.Main(context.Background(), os.Stdin, os.Stdout, os.Stderr, args)
}
