// Command pinfold runs commands in a sandbox and keeps what they change
// reviewable. See internal/cli for the commands. On systems other than
// Linux it is a client of a pinfold server (internal/remote).
package main

import (
	"os"
	"runtime"
)

func main() {
	// pinfold waits on its sandbox far more than it computes; one P keeps
	// the runtime from starting threads that would only compete with the
	// sandbox for the CPU and slow pinfold's own exit.
	runtime.GOMAXPROCS(1)
	os.Exit(run(os.Args[1:]))
}
