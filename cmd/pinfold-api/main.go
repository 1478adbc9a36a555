// Command pinfold-api is pinfold's HTTP API helper: pinfold serve runs it
// as the server (on Linux), and pinfold's session commands run it as the
// client when PINFOLD_HOST is set. It holds net/http, which pinfold itself
// does not link. See internal/apihelper.
package main

import (
	"os"

	"github.com/pinfold/pinfold/internal/apihelper"
)

func main() { os.Exit(apihelper.Main()) }
