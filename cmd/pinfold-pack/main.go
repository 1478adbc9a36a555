// Command pinfold-pack is pinfold's image-writing helper: `pinfold pack`
// starts it with a JSON job on stdin and reads a JSON result on stdout.
// It holds go-containerregistry, which a plain `pinfold run` does not
// link. It is not run by hand; see internal/pack and internal/packer.
package main

import (
	"os"

	"github.com/pinfold/pinfold/internal/packer"
)

func main() { os.Exit(packer.Main()) }
