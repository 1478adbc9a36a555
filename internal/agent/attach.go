package agent

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// A kubernetes session's pod may run the agent as its main container's
// own command, whose stdin and stdout the runtime reaches by an attach
// (no new process in the pod, unlike an exec): the attach's stream is
// then the session's first connection. The stream needs framing that an
// exec's does not: the container's stdin starts empty and its stdout
// stays open after the connection ends (until the container does).
//
// Client to agent: one envelope of the session's environment (4-byte
// big-endian length, the NUL-separated variables), then the connection's
// bytes; the end of stdin is the end of the client's writes. Agent to
// client: BridgeReady once it serves, then the connection's bytes in
// chunks of a 4-byte big-endian length and that many bytes, a chunk of
// length 0 for the connection's end.

// EnvAttach, as the agent's second argument, makes it read its
// environment in an envelope from stdin, then a workspace's tar in
// chunks (the end's chunk alone: none), which it unpacks into the
// directory its third argument names, and then serve stdin and stdout
// as one connection besides its socket (the attach's framing, above).
// It answers BridgeReady, or AttachError and why, on a line.
const EnvAttach = "env-attach"

// AttachError begins the agent's answer when it cannot serve the attach.
const AttachError = "pinfold-attach-error: "

// AttachLinks, as the agent's fourth argument (after EnvAttach's
// directory), makes it wait before it serves until every link but
// loopback is down (a netoff container's work) and answer LinksLine with
// each link's flags ("NAME FLAGS", joined by ";") before BridgeReady.
const AttachLinks = "links-down"

// LinksLine begins the line of the links' flags.
const LinksLine = "pinfold-links: "

// BridgeWait, as the bridge's argument, makes it wait until the agent
// that is main's command ended (the command's shell writes StatusFile in
// RunDir) and exit with its status: that agent's end, for the runtime,
// which holds no exec of it.
const BridgeWait = "wait"

// StatusFile, in RunDir, is the exit status of the agent run as main's
// command, written by the shell that ran it.
const StatusFile = "agent-status"

// maxEnv bounds the environment's envelope.
const maxEnv = 4 << 20

// WriteEnv writes env's envelope.
func WriteEnv(w io.Writer, env []string) error {
	b := []byte(strings.Join(env, "\x00"))
	if len(b) > maxEnv {
		// The agent would refuse it, and say so only in main's log.
		return fmt.Errorf("the session's environment is %d bytes, more than %d", len(b), maxEnv)
	}
	var h [4]byte
	binary.BigEndian.PutUint32(h[:], uint32(len(b)))
	_, err := w.Write(append(h[:], b...))
	return err
}

// ReadEnv reads an environment's envelope.
func ReadEnv(r io.Reader) ([]string, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h[:])
	if n > maxEnv {
		return nil, fmt.Errorf("an environment of %d bytes exceeds %d", n, maxEnv)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	return strings.Split(string(b), "\x00"), nil
}

// ChunkWriter writes each Write as one chunk; Close writes the end's.
type ChunkWriter struct{ W io.Writer }

func (c ChunkWriter) Write(p []byte) (int, error) {
	all := len(p)
	for len(p) > 0 {
		n := min(len(p), maxFrame)
		var h [4]byte
		binary.BigEndian.PutUint32(h[:], uint32(n))
		if _, err := c.W.Write(append(h[:], p[:n]...)); err != nil {
			return 0, err
		}
		p = p[n:]
	}
	return all, nil
}

// Close writes the end's chunk.
func (c ChunkWriter) Close() error {
	_, err := c.W.Write([]byte{0, 0, 0, 0})
	return err
}

// ChunkReader reads what a ChunkWriter wrote: io.EOF at the end's chunk,
// io.ErrUnexpectedEOF if the stream ends before it.
type ChunkReader struct {
	R    *bufio.Reader
	left int
	end  bool
}

func (c *ChunkReader) Read(p []byte) (int, error) {
	if c.end {
		return 0, io.EOF
	}
	if c.left == 0 {
		var h [4]byte
		if _, err := io.ReadFull(c.R, h[:]); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		n := binary.BigEndian.Uint32(h[:])
		if n == 0 {
			c.end = true
			return 0, io.EOF
		}
		if n > maxFrame {
			return 0, fmt.Errorf("a chunk of %d bytes exceeds %d", n, maxFrame)
		}
		c.left = int(n)
	}
	n, err := c.R.Read(p[:min(len(p), c.left)])
	c.left -= n
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}
