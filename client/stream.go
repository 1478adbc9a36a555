package client

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"syscall"

	"github.com/coder/websocket"
)

// StreamRequest starts a command whose streams are live.
type StreamRequest struct {
	Args []string `json:"args"`
	Env  []string `json:"env,omitempty"`
	Dir  string   `json:"dir,omitempty"`
	// TTY runs it on a terminal of Rows x Cols (Stderr is then unused).
	TTY  bool   `json:"tty,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
	// Stdin is set by Stream when a reader is given.
	Stdin bool `json:"stdin,omitempty"`
}

// Exit is how a streamed command ended.
type Exit struct {
	Code   int    `json:"code"`
	Signal int    `json:"signal,omitempty"`
	Error  string `json:"error,omitempty"`
	// NotFound, NotExecutable and BadDir say why a command could not
	// start: no such command, not executable, no such working directory.
	NotFound      bool `json:"not_found,omitempty"`
	NotExecutable bool `json:"not_executable,omitempty"`
	BadDir        bool `json:"bad_dir,omitempty"`
	// Truncated says output was cut off: a process the command left
	// running held its output open after the command ended, and what it
	// wrote later was not waited for.
	Truncated bool `json:"truncated,omitempty"`
}

// Process is a command running in a sandbox over a WebSocket.
type Process struct {
	c      *websocket.Conn
	ctx    context.Context
	exit   *Exit
	err    error
	done   chan struct{}
	stdout io.Writer
	stderr io.Writer
}

// Start runs a command with live streams: its output goes to stdout and
// stderr as it comes, stdin (nil: none) is sent as it is read.
func (c *Client) Start(ctx context.Context, id string, r StreamRequest, stdin io.Reader, stdout, stderr io.Writer) (*Process, error) {
	u := strings.Replace(c.base, "http", "ws", 1) + sb(id) + "/exec/stream"
	h := http.Header{}
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.hc, HTTPHeader: h})
	if err != nil {
		if resp != nil && resp.StatusCode >= 300 {
			var wrapped struct {
				Error Error `json:"error"`
			}
			if resp.Body != nil {
				json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&wrapped)
			}
			wrapped.Error.Status = resp.StatusCode
			if wrapped.Error.Code == "" {
				wrapped.Error.Code, wrapped.Error.Message = CodeAPI, err.Error()
			}
			return nil, &wrapped.Error
		}
		return nil, err
	}
	conn.SetReadLimit(2 << 20)
	r.Stdin = stdin != nil
	b, _ := json.Marshal(r)
	if err := conn.Write(ctx, websocket.MessageText, b); err != nil {
		conn.CloseNow()
		return nil, err
	}
	p := &Process{c: conn, ctx: ctx, done: make(chan struct{}), stdout: stdout, stderr: stderr}
	if stdin != nil {
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := stdin.Read(buf)
				if n > 0 {
					if p.send('i', buf[:n]) != nil {
						return
					}
				}
				if err != nil {
					p.send('I', nil)
					return
				}
			}
		}()
	}
	go p.read()
	return p, nil
}

func (p *Process) send(t byte, b []byte) error {
	return p.c.Write(p.ctx, websocket.MessageBinary, append([]byte{t}, b...))
}

func (p *Process) read() {
	defer close(p.done)
	for {
		typ, msg, err := p.c.Read(p.ctx)
		if err != nil {
			p.err = errors.New("the stream ended before the command: " + err.Error())
			return
		}
		if typ != websocket.MessageBinary || len(msg) == 0 {
			continue
		}
		switch msg[0] {
		case 'o':
			if p.stdout != nil {
				p.stdout.Write(msg[1:])
			}
		case 'e':
			if p.stderr != nil {
				p.stderr.Write(msg[1:])
			}
		case 'x':
			var e Exit
			if err := json.Unmarshal(msg[1:], &e); err != nil {
				p.err = err
			} else {
				p.exit = &e
			}
			p.c.Close(websocket.StatusNormalClosure, "")
			return
		}
	}
}

// Signal sends sig to the command's process group.
func (p *Process) Signal(sig syscall.Signal) error { return p.send('s', []byte{byte(sig)}) }

// Resize changes the command's terminal size.
func (p *Process) Resize(rows, cols uint16) error {
	var b [4]byte
	binary.BigEndian.PutUint16(b[:], rows)
	binary.BigEndian.PutUint16(b[2:], cols)
	return p.send('r', b[:])
}

// Close drops the stream: the command is hung up (SIGHUP).
func (p *Process) Close() error { return p.c.CloseNow() }

// Wait waits for the command and reports how it ended.
func (p *Process) Wait() (*Exit, error) {
	<-p.done
	if p.exit == nil && p.err == nil {
		p.err = errors.New("the stream ended before the command")
	}
	return p.exit, p.err
}

// Stream runs a command with live streams and waits for it.
func (c *Client) Stream(ctx context.Context, id string, r StreamRequest, stdin io.Reader, stdout, stderr io.Writer) (*Exit, error) {
	p, err := c.Start(ctx, id, r, stdin, stdout, stderr)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return p.Wait()
}
