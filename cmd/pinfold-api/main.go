// Command pinfold-api is pinfold's HTTP API server (pinfold serve runs
// it) and client (pinfold's session commands run it with PINFOLD_HOST
// set): a helper binary, like pinfold-net, so that net/http and the
// WebSocket library stay out of pinfold's own start-up.
//
//	pinfold-api serve [--socket PATH] [--listen ADDR --tokens FILE [--policy FILE]] [--max-upload BYTES] [--max-body BYTES] [--kube-pool N]
//	                  [--max-conns N] [--header-timeout D] [--body-timeout D] [--write-timeout D] [--idle-timeout D]
//	pinfold-api client session|exec|shell ARGS...
//
// The server runs on Linux only (serve_linux.go); the client builds for
// macOS and Windows too, where pinfold drives a remote server with it.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) >= 2 && os.Args[1] == "client" {
		os.Exit(clientMain(os.Args[2:]))
	}
	if len(os.Args) < 2 || os.Args[1] != "serve" {
		fmt.Fprintln(os.Stderr, "usage: pinfold-api serve [--socket PATH] [--listen ADDR --tokens FILE [--policy FILE]] [--max-upload BYTES] [--max-body BYTES]")
		os.Exit(125)
	}
	os.Exit(serve(os.Args[2:]))
}
