// Command pinfold runs commands in a sandbox and keeps what they change
// reviewable. See internal/cli for the commands.
package main

import (
	"context"
	"os"
	"runtime"

	"github.com/pinfold/pinfold/internal/cli"
)

func main() {
	// pinfold waits on its sandbox far more than it computes; one P keeps
	// the runtime from starting threads that would only compete with the
	// sandbox for the CPU and slow pinfold's own exit.
	runtime.GOMAXPROCS(1)
	os.Exit(cli.Main(context.Background(), &cli.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}, os.Args[1:]))
}
