package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"strconv"
	"time"
)

// OpError is a failed file or port operation of the agent.
type OpError struct {
	Op, Path string
	Exit     Exit
}

func (e *OpError) Error() string { return e.Op + " " + e.Path + ": " + e.Exit.Error }

// Unwrap lets errors.Is find fs.ErrNotExist and fs.ErrPermission.
func (e *OpError) Unwrap() error {
	switch {
	case e.Exit.NotFound:
		return fs.ErrNotExist
	case e.Exit.NotExecutable:
		return fs.ErrPermission
	}
	return nil
}

// op sends req and reads the answer: FrameOK's payload into v, or the
// error of a FrameExit.
func op(ctx context.Context, sock string, req *Request, v any) (*net.UnixConn, *bufio.Reader, error) {
	c, err := dial(ctx, sock)
	if err != nil {
		return nil, nil, err
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	if err := writeRequest(c, req); err != nil {
		c.Close()
		return nil, nil, err
	}
	r := bufio.NewReaderSize(c, 64<<10)
	t, b, err := readFrame(r, nil)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	if t == FrameExit {
		c.Close()
		var e Exit
		json.Unmarshal(b, &e)
		return nil, nil, &OpError{Op: req.Op, Path: req.Path, Exit: e}
	}
	if t != FrameOK {
		c.Close()
		return nil, nil, fmt.Errorf("unexpected frame %q", t)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			c.Close()
			return nil, nil, err
		}
	}
	return c, r, nil
}

// Stat describes a path in the session.
func Stat(ctx context.Context, sock, path string) (*FileInfo, error) {
	var fi FileInfo
	c, _, err := op(ctx, sock, &Request{Op: "stat", Path: path}, &fi)
	if err != nil {
		return nil, err
	}
	c.Close()
	return &fi, nil
}

// List lists a directory of the session.
func List(ctx context.Context, sock, path string) ([]FileInfo, error) {
	var list []FileInfo
	c, _, err := op(ctx, sock, &Request{Op: "list", Path: path}, &list)
	if err != nil {
		return nil, err
	}
	c.Close()
	return list, nil
}

// Remove deletes a path of the session (a directory with recursive).
func Remove(ctx context.Context, sock, path string, recursive bool) error {
	c, _, err := op(ctx, sock, &Request{Op: "remove", Path: path, Recursive: recursive}, nil)
	if err != nil {
		return err
	}
	return c.Close()
}

// ReadFile copies a file of the session to w. info, when set, hears the
// file's description before its bytes.
func ReadFile(ctx context.Context, sock, path string, w io.Writer, info func(*FileInfo)) error {
	var fi FileInfo
	c, r, err := op(ctx, sock, &Request{Op: "read", Path: path}, &fi)
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	if info != nil {
		info(&fi)
	}
	var buf []byte
	for {
		t, b, err := readFrame(r, buf)
		if err != nil {
			return err
		}
		buf = b
		switch t {
		case FrameStdout:
			if _, err := w.Write(b); err != nil {
				return err
			}
		case FrameExit:
			var e Exit
			json.Unmarshal(b, &e)
			if e.Error != "" {
				return &OpError{Op: "read", Path: path, Exit: e}
			}
			return nil
		}
	}
}

// ErrTooLarge is returned by WriteFile for content beyond its limit.
var ErrTooLarge = errors.New("file too large")

// WriteFile writes r (at most limit bytes; 0: no limit) to a file of the
// session, replacing it whole: nothing is written unless all of r is.
func WriteFile(ctx context.Context, sock, path string, mode uint32, r io.Reader, limit int64) error {
	t, b, err := upload(ctx, sock, &Request{Op: "write", Path: path, Mode: mode}, r, limit)
	if err != nil {
		return err
	}
	if t == FrameExit {
		var e Exit
		json.Unmarshal(b, &e)
		return &OpError{Op: "write", Path: path, Exit: e}
	}
	return nil
}

// upload sends req, then r (at most limit bytes; 0: no limit) as stdin
// frames and their end, and returns the agent's answer frame.
func upload(ctx context.Context, sock string, req *Request, r io.Reader, limit int64) (byte, []byte, error) {
	c, err := dial(ctx, sock)
	if err != nil {
		return 0, nil, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	if err := writeRequest(c, req); err != nil {
		return 0, nil, err
	}
	fw := &frameWriter{w: c}
	var n int64
	buf := make([]byte, 256<<10)
	for {
		k, rerr := r.Read(buf)
		if k > 0 {
			n += int64(k)
			if limit > 0 && n > limit {
				return 0, nil, ErrTooLarge // closing drops the upload
			}
			if err := fw.frame(FrameStdin, buf[:k]); err != nil {
				// The agent answered (a refusal: a missing directory,
				// a path it may not write) and closed before taking
				// the rest: its answer says why, not the broken pipe.
				if t, b, rerr := readFrame(bufio.NewReader(c), nil); rerr == nil {
					return t, b, nil
				}
				return 0, nil, err
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return 0, nil, rerr
		}
	}
	if err := fw.frame(FrameStdinEOF, nil); err != nil {
		if t, b, rerr := readFrame(bufio.NewReader(c), nil); rerr == nil {
			return t, b, nil
		}
		return 0, nil, err
	}
	return readFrame(bufio.NewReader(c), nil)
}

// Connect opens a connection to TCP port on the session's loopback.
func Connect(ctx context.Context, sock string, port int) (net.Conn, error) {
	c, r, err := op(ctx, sock, &Request{Op: "connect", Port: port}, nil)
	if err != nil {
		return nil, err
	}
	return &bufferedConn{UnixConn: c, r: r}, nil
}

type bufferedConn struct {
	*net.UnixConn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// Forward listens on hostAddr ("127.0.0.1:8080"; port 0 picks one) and
// forwards each connection to port on the session's loopback, until the
// listener is closed.
func Forward(sock, hostAddr string, port int) (net.Listener, error) {
	if port <= 0 || port > 65535 {
		return nil, errors.New("invalid port " + strconv.Itoa(port))
	}
	l, err := net.Listen("tcp", hostAddr)
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				s, err := Connect(ctx, sock, port)
				cancel()
				if err != nil {
					return
				}
				defer s.Close()
				done := make(chan struct{}, 2)
				go func() { io.Copy(s, c); s.(*bufferedConn).CloseWrite(); done <- struct{}{} }()
				go func() { io.Copy(c, s); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
				<-done
				<-done
			}()
		}
	}()
	return l, nil
}

// Restore sends a layer (an uncompressed OCI layer tar) to the agent at
// sock, which replays it onto the sandbox's file system.
func Restore(ctx context.Context, sock string, layer io.Reader) error {
	t, b, err := upload(ctx, sock, &Request{Op: "restore"}, layer, 0)
	if err != nil {
		return err
	}
	if t != FrameOK {
		var e Exit
		json.Unmarshal(b, &e)
		return &OpError{Op: "restore", Path: "/", Exit: e}
	}
	return nil
}
