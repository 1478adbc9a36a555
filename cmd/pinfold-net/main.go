// Command pinfold-net is pinfold's network helper: pinfold starts it for
// each sandbox whose network goes through pinfold's stack (outbound,
// allow, published ports) and it serves the sandbox's TUN device with
// gVisor's netstack under the sandbox's policy. It is not run by hand; see
// internal/netstack.
package main

import (
	"os"

	"github.com/pinfold/pinfold/internal/netstack"
)

func main() { os.Exit(netstack.Main()) }
