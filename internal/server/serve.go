package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
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

// Serve serves s on the listeners until ctx ends.
func Serve(ctx context.Context, s *Server, ls ...net.Listener) error {
	hs := &http.Server{Handler: s, ConnContext: ConnContext, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10}
	errc := make(chan error, len(ls))
	for _, l := range ls {
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
