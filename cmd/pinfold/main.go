// Command pinfold runs commands in a sandbox and keeps what they change
// reviewable. See internal/cli for the commands.
package main

import (
	"context"
	"os"

	"github.com/pinfold/pinfold/internal/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), &cli.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}, os.Args[1:]))
}
