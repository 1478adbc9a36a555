// Package terminal is what pinfold's front ends (pinfold run, exec and
// shell, locally or through the HTTP API) do with the user's terminal:
// put it in raw mode, read its size, and forward the signals a command
// should get instead of pinfold, window changes among them. One copy, so
// that every front end forwards the same signals. Windows, which has no
// such signals, gets the terminal part only.
package terminal

import "os"

// Term is the TERM to give a command on a terminal: the user's, or xterm.
func Term() string {
	if t := os.Getenv("TERM"); t != "" {
		return t
	}
	return "xterm"
}
