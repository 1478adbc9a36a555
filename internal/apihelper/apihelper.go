// Package apihelper is the pinfold-api helper binary: pinfold's HTTP API
// server (pinfold serve runs it) and client (pinfold's session commands
// run it with PINFOLD_HOST set), apart from pinfold so that net/http and
// the WebSocket library stay out of pinfold's own start-up.
//
//	pinfold-api serve [the flags of pinfold serve: internal/serveconf]
//	pinfold-api client session|exec|shell ARGS...
//	pinfold-api mcp [--workspace DIR] (pinfold mcp: MCP on stdin and stdout)
//
// The server runs on Linux only (serve_linux.go); the client builds for
// macOS and Windows too, where pinfold drives a remote server with it.
package apihelper

import (
	"fmt"
	"os"
)

// Main runs the helper with os.Args and returns its exit code.
func Main() int {
	if len(os.Args) >= 2 && os.Args[1] == "client" {
		return clientMain(os.Args[2:])
	}
	if len(os.Args) >= 2 && os.Args[1] == "mcp" {
		return mcpMain(os.Args[2:])
	}
	if len(os.Args) < 2 || os.Args[1] != "serve" {
		fmt.Fprintln(os.Stderr, "usage: pinfold-api serve [--socket PATH] [--listen ADDR --tokens FILE [--policy FILE]] [--max-upload BYTES] [--max-body BYTES]")
		return 125
	}
	return serve(os.Args[2:])
}
