package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/pinfold/pinfold/internal/serveconf"
)

// SocketName is the API's unix socket in the store.
const SocketName = "api.sock"

// DefaultSocket is the API's socket for the store at dir.
func DefaultSocket(store string) string { return filepath.Join(store, SocketName) }

// ListenUnix listens on an owner-only unix socket at path, replacing a
// stale one (a socket nobody answers on); a live server's is refused.
func ListenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("a server already listens on %s", path)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		os.Remove(path)
	}
	// Created owner-only, not chmod-ed after: no moment when others may
	// connect.
	old := umask(0o077)
	l, err := net.Listen("unix", path)
	umask(old)
	return l, err
}

// ReadTokens reads a tokens file: one "TENANT TOKEN" a line, # comments.
// The file must not be readable by others (fail closed).
func ReadTokens(path string) (map[string]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s is readable by others (mode %v): chmod 600 it", path, fi.Mode().Perm())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tokens := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Fields(line)
		if len(fs) != 2 || len(fs[1]) < 16 || fs[0] == "" {
			return nil, fmt.Errorf("%s:%d: want TENANT TOKEN, the token at least 16 characters", path, n)
		}
		for _, c := range fs[0] {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return nil, fmt.Errorf("%s:%d: a tenant is letters, digits, '-' and '_'", path, n)
			}
		}
		if _, dup := tokens[fs[1]]; dup {
			return nil, fmt.Errorf("%s:%d: the token is given twice", path, n)
		}
		tokens[fs[1]] = fs[0]
	}
	if len(tokens) == 0 {
		return nil, errors.New(path + " holds no token")
	}
	return tokens, sc.Err()
}

// Bounds bound the API's connections, so that no client, authenticated
// or not, holds one or the server's memory for long by sending or reading
// slowly. pinfold serve's flags set them; zero fields take the defaults.
type Bounds struct {
	// MaxConns is the number of connections served at once on each
	// listener; further ones wait in the listen queue until one ends.
	MaxConns int
	// HeaderTimeout bounds reading a request's head; IdleTimeout the
	// wait for the next request on a kept-alive connection.
	HeaderTimeout, IdleTimeout time.Duration
	// BodyTimeout bounds reading a JSON body; an upload has BodyTimeout
	// plus a second per minUploadRate bytes of its size.
	BodyTimeout time.Duration
	// WriteTimeout bounds every write of an answer (each piece of a long
	// one, each frame of a streamed exec): a client that stops reading is
	// dropped.
	WriteTimeout time.Duration
}

// Defaults of Bounds.
const (
	DefaultMaxConns      = serveconf.DefaultMaxConns
	DefaultHeaderTimeout = serveconf.DefaultHeaderTimeout
	DefaultBodyTimeout   = serveconf.DefaultBodyTimeout
	DefaultWriteTimeout  = serveconf.DefaultWriteTimeout
	DefaultIdleTimeout   = serveconf.DefaultIdleTimeout
	// minUploadRate is the slowest upload waited for, in bytes a second.
	minUploadRate = 256 << 10
)

func (l Bounds) withDefaults() Bounds {
	set := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	if l.MaxConns <= 0 {
		l.MaxConns = DefaultMaxConns
	}
	set(&l.HeaderTimeout, DefaultHeaderTimeout)
	set(&l.BodyTimeout, DefaultBodyTimeout)
	set(&l.WriteTimeout, DefaultWriteTimeout)
	set(&l.IdleTimeout, DefaultIdleTimeout)
	return l
}

// Serve serves s on the listeners until ctx ends, with the default Bounds.
func Serve(ctx context.Context, s *Server, ls ...net.Listener) error {
	return ServeLimited(ctx, s, Bounds{}, ls...)
}

// ServeLimited serves s on the listeners until ctx ends, within lim.
//
// http.Server's ReadTimeout and WriteTimeout are not used: they run from
// the start of a request, and an exec or a streamed exec lasts as long as
// its command. The head is bounded by ReadHeaderTimeout, the body and the
// answer by the deadlines bounded sets on each request.
func ServeLimited(ctx context.Context, s *Server, lim Bounds, ls ...net.Listener) error {
	lim = lim.withDefaults()
	s.lim = lim
	connContext := func(ctx context.Context, c net.Conn) context.Context {
		if lc, ok := c.(*limitConn); ok {
			c = lc.Conn // a unix socket's peer is read from the socket itself
		}
		return ConnContext(ctx, c)
	}
	hs := &http.Server{Handler: s.bounded(s), ConnContext: connContext, MaxHeaderBytes: 64 << 10,
		ReadHeaderTimeout: lim.HeaderTimeout, IdleTimeout: lim.IdleTimeout}
	errc := make(chan error, len(ls))
	for _, l := range ls {
		l := LimitListener(l, lim.MaxConns)
		go func() { errc <- hs.Serve(l) }()
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		hs.Close()
		s.Close()
		return err
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hs.Shutdown(sctx)
	s.Close()
	return nil
}

// bounded puts deadlines on what h's handlers read and write: the body
// must arrive within BodyTimeout (an upload: more, by its size), and every
// write of the answer must be taken within WriteTimeout. A hijacked
// WebSocket's connection is its handler's, which bounds its writes itself.
func (s *Server) bounded(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
			d := s.lim.BodyTimeout
			if r.Method == http.MethodPut || r.URL.Path == "/files" { // E2B's upload is a POST
				size := r.ContentLength
				if size < 0 || size > s.cfg.MaxUpload {
					size = s.cfg.MaxUpload
				}
				d += time.Duration(size/minUploadRate) * time.Second
			}
			rc.SetReadDeadline(time.Now().Add(d))
			r.Body = &bodyReader{ReadCloser: r.Body, rc: rc}
		}
		// Whatever the request's headers say: a WebSocket's handshake
		// goes through it too (its library finds the connection by
		// Unwrap), and hijacking lifts the deadline.
		h.ServeHTTP(&boundedWriter{ResponseWriter: w, rc: rc, d: s.lim.WriteTimeout}, r)
	})
}

// writeTimeout is Bounds.WriteTimeout, the default when not served by
// ServeLimited.
func (s *Server) writeTimeout() time.Duration {
	if s.lim.WriteTimeout > 0 {
		return s.lim.WriteTimeout
	}
	return DefaultWriteTimeout
}

// bodyReader lifts the body's deadline once the body is read, so that
// net/http's watch for the client going away (a read past the body) is
// not cut by it while a long exec runs.
type bodyReader struct {
	io.ReadCloser
	rc *http.ResponseController
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// boundedWriter gives every write of an answer d to be taken.
type boundedWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (w *boundedWriter) WriteHeader(code int) {
	w.rc.SetWriteDeadline(time.Now().Add(w.d))
	w.ResponseWriter.WriteHeader(code)
}

// Write writes b in pieces of writePiece, each with d to be taken: a
// large answer (an exec's JSON is one write) is not cut off for its
// size, a client reading slower than writePiece per d is.
func (w *boundedWriter) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		p := b[:min(len(b), writePiece)]
		w.rc.SetWriteDeadline(time.Now().Add(w.d))
		m, err := w.ResponseWriter.Write(p)
		n += m
		if err != nil {
			return n, err
		}
		b = b[len(p):]
	}
	return n, nil
}

const writePiece = 64 << 10

func (w *boundedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// LimitListener returns a listener that has at most n of l's connections
// open at once: Accept waits until one of them is closed.
func LimitListener(l net.Listener, n int) net.Listener {
	return &limitListener{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

// limitConn gives its slot back once, on the first Close.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
