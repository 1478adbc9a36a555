// Package untrusted opens what a sandbox could have written (a session's
// run directory and home, a changeset's upper directories) from the host
// side: it never follows a link there, opens only the kind of file it
// expects (a FIFO or device planted where a file was would block or act),
// and reads no more than a bound.
package untrusted

import "errors"

// Errors, which callers wrap with the path.
var (
	ErrLink     = errors.New("is a symbolic link")
	ErrNotFile  = errors.New("is not a regular file")
	ErrNotSock  = errors.New("is not a socket")
	ErrTooLarge = errors.New("is larger than expected")
)
