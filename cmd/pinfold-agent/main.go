// Command pinfold-agent is a session's agent alone: what pinfold runs as
// `pinfold __session-agent` and `pinfold __session-bridge`, without the
// rest of pinfold. The kubernetes runtime copies it into each cold
// session's pod (a third of pinfold's size, so a third of the copy);
// pinfold-kube finds it beside itself and falls back to pinfold's own
// binary without it. It is not run by hand.
package main

import (
	"fmt"
	"os"
)

func main() {
	code, ok := serve(os.Args[1:])
	if !ok {
		fmt.Fprintln(os.Stderr, "pinfold-agent: a session's agent, which pinfold-kube copies into a pod (Linux); not run by hand")
	}
	os.Exit(code)
}
