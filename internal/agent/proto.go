// Package agent is pinfold's session agent and its protocol. The agent is
// pinfold's own binary run as a sandbox's command (AgentCommand, bound in
// at AgentPath): it listens on a unix socket in RunDir and forks the
// commands it is asked to run, so that an exec into a running sandbox is
// one connect and one fork, with no setns, and everything it starts shares
// the sandbox's /tmp, home, processes and changeset. It also reads and
// writes files, forwards ports and restores snapshots, inside the sandbox
// and as its user. internal/session (pinfold's sessions) and
// sandbox/native (the library's sessions) start it; the host side of the
// protocol (Exec, Stat, ReadFile, WriteFile, Connect, Forward, Restore) is
// here too.
//
// The wire protocol: one JSON line (Request), then frames of one type byte
// and a big-endian uint32 length in both directions (the Frame constants).
// pinfold exec's fast path speaks it too, in C, before the Go runtime
// starts (internal/backend/native/initc/fastexec.c): a change to the
// request, the frames or Exit's JSON must be made there as well
// (internal/cli's TestExecFastPath compares the two).
package agent

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// Paths inside the sandbox.
const (
	AgentPath = "/.pinfold/agent" // pinfold's binary
	RunDir    = "/.pinfold/run"   // the session's run directory, with the socket
	Home      = "/home/sandbox"   // the session's writable home
	sockName  = "agent.sock"
)

// AgentCommand is the hidden subcommand that runs the agent.
const AgentCommand = "__session-agent"

// Agent exit statuses, which the supervisor records as the reason.
const (
	ExitStopped = 0 // asked to stop, or SIGTERM
	ExitIdle    = 3 // idle for its timeout
)

// ExitMarker is the file in the run directory where the agent writes how
// it ended ("stopped", "idle") as it exits.
const ExitMarker = "exit"

// SockName is the socket's name in the run directory.
const SockName = sockName

// Request is what a client asks the agent, as the first line.
type Request struct {
	Op   string   `json:"op"` // "exec", "stop", "ping"
	Args []string `json:"args,omitempty"`
	// Env adds to (or overrides) the session's environment; with
	// Clearenv it is the whole environment.
	Env      []string `json:"env,omitempty"`
	Clearenv bool     `json:"clearenv,omitempty"`
	Dir      string   `json:"dir,omitempty"`
	TTY      bool     `json:"tty,omitempty"`
	Rows     uint16   `json:"rows,omitempty"`
	Cols     uint16   `json:"cols,omitempty"`
	// Stdin: the client sends stdin frames; otherwise the command reads
	// /dev/null.
	Stdin bool `json:"stdin,omitempty"`
	// Path is the file of "read", "write", "stat", "list" and "remove";
	// Mode the permissions "write" gives a new file; Recursive lets
	// "remove" delete a directory with what it holds.
	Path      string `json:"path,omitempty"`
	Mode      uint32 `json:"mode,omitempty"`
	Recursive bool   `json:"recursive,omitempty"`
	// Port is the sandbox's TCP port "connect" reaches on 127.0.0.1.
	Port int `json:"port,omitempty"`
}

// FileInfo describes a file in the sandbox ("stat", "list").
type FileInfo struct {
	Name     string    `json:"name"`
	Size     int64     `json:"size"`
	Mode     uint32    `json:"mode"`             // permission bits
	Type     string    `json:"type"`             // "file", "dir", "symlink", "other"
	Target   string    `json:"target,omitempty"` // a symlink's
	Modified time.Time `json:"modified"`
}

// Exit is how an exec ended (the payload of a FrameExit).
type Exit struct {
	Code   int    `json:"code"`
	Signal int    `json:"signal,omitempty"`
	Error  string `json:"error,omitempty"`
	// NotFound and NotExecutable classify an Error from starting the command.
	NotFound      bool `json:"not_found,omitempty"`
	NotExecutable bool `json:"not_executable,omitempty"`
	// BadDir says the command did not start because its working
	// directory (Request.Dir) is missing or not a directory.
	BadDir bool `json:"bad_dir,omitempty"`
	// Truncated says output was cut off: a process the command left
	// running still held its stdout or stderr (or terminal) open once
	// all the command wrote had been sent, and what it wrote after a
	// short while was not waited for.
	Truncated bool `json:"truncated,omitempty"`
}

// Frame types.
const (
	FrameStdin    = 'i' // client: bytes for the command's stdin
	FrameStdinEOF = 'I' // client: stdin ended
	FrameSignal   = 's' // client: 1 byte, a signal for the command's process group
	FrameResize   = 'r' // client: rows, cols as two big-endian uint16
	FrameStdout   = 'o' // agent: output (the terminal's, with TTY)
	FrameStderr   = 'e' // agent: error output
	FrameStarted  = 'p' // agent: the command runs (payload: its pid inside, decimal)
	FrameExit     = 'x' // agent: JSON Exit; the last frame
	FrameOK       = 'k' // agent: an op other than exec succeeded (payload: JSON)
)

// maxFrame bounds a frame's payload.
const maxFrame = 1 << 20

// frameWriter writes frames; safe for concurrent use.
type frameWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (f *frameWriter) frame(t byte, b []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		n := len(b)
		if n > maxFrame {
			n = maxFrame
		}
		var h [5]byte
		h[0] = t
		binary.BigEndian.PutUint32(h[1:], uint32(n))
		if _, err := f.w.Write(append(h[:], b[:n]...)); err != nil {
			return err
		}
		b = b[n:]
		if len(b) == 0 {
			return nil
		}
	}
}

// stream is an io.Writer that sends frames of one type.
type stream struct {
	f *frameWriter
	t byte
}

func (s stream) Write(b []byte) (int, error) {
	if err := s.f.frame(s.t, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

// readFrame reads one frame; buf is reused when large enough.
func readFrame(r *bufio.Reader, buf []byte) (byte, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > maxFrame {
		return 0, nil, fmt.Errorf("frame of %d bytes exceeds %d", n, maxFrame)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, err
	}
	return h[0], buf, nil
}

func writeRequest(w io.Writer, req *Request) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// maxRequest bounds the request line.
const maxRequest = 1 << 20

func readRequest(r *bufio.Reader) (*Request, error) {
	var line []byte
	for {
		chunk, isPrefix, err := r.ReadLine()
		if err != nil {
			return nil, err
		}
		line = append(line, chunk...)
		if len(line) > maxRequest {
			return nil, errors.New("request too long")
		}
		if !isPrefix {
			break
		}
	}
	var req Request
	if err := json.Unmarshal(line, &req); err != nil {
		return nil, err
	}
	return &req, nil
}
