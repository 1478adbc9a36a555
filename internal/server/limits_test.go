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
	"strings"
	"testing"
	"time"
)

const testToken = "token-of-the-test-tenant-0123"

// serveTCP serves a server of a fresh store on loopback TCP within lim and
// returns its address.
func serveTCP(t *testing.T, lim Bounds) string {
	t.Helper()
	s := New(Config{Store: t.TempDir(), Tokens: map[string]string{testToken: "t"}, Tenants: t.TempDir()})
	return serveOn(t, s, lim)
}

func serveOn(t *testing.T, s *Server, lim Bounds) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { ServeLimited(ctx, s, lim, l); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return l.Addr().String()
}

// drip sends s one byte a second on c until it is sent, the connection
// fails or stop closes.
func drip(c net.Conn, s string, stop <-chan struct{}) {
	for i := 0; i < len(s); i++ {
		if _, err := c.Write([]byte{s[i]}); err != nil {
			return
		}
		select {
		case <-stop:
			return
		case <-time.After(time.Second):
		}
	}
}

// answerWithin reads c's answer: its status line, or "closed" when the
// server closed the connection without one, or "" when nothing came
// within d.
func answerWithin(c net.Conn, d time.Duration) string {
	c.SetReadDeadline(time.Now().Add(d))
	line, err := bufio.NewReader(c).ReadString('\n')
	var ne net.Error
	switch {
	case err == nil:
		return strings.TrimSpace(line)
	case errors.As(err, &ne) && ne.Timeout():
		return ""
	default:
		return "closed"
	}
}

// TestSlowClients: no phase of a request is unbounded, for a stranger or
// a token holder: a stranger's body is never read (401 at once, however
// slowly it comes), a head or an authenticated body sent a byte a second
// is cut off, and an idle connection closed.
func TestSlowClients(t *testing.T) {
	lim := Bounds{HeaderTimeout: time.Second, BodyTimeout: time.Second, IdleTimeout: time.Second, WriteTimeout: time.Second}
	addr := serveTCP(t, lim)
	const bound = 4 * time.Second // the limits above, with room for a loaded machine
	for _, c := range []struct {
		name, head, body string
		want             string // the status line's start, "closed", or "" for either
	}{
		{"a stranger's body", "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n",
			strings.Repeat("x", 100), "HTTP/1.1 401"},
		{"a stranger's chunked body", "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
			"64\r\n" + strings.Repeat("x", 100), "HTTP/1.1 401"},
		{"a wrong token's upload", "PUT /v1/sandboxes/x/files?path=/tmp/f HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong-token-0123456789\r\nContent-Length: 100\r\n\r\n",
			strings.Repeat("x", 100), "HTTP/1.1 401"},
		{"a head", "", "GET /v1/health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + testToken + "\r\n\r\n", ""},
		// Answered (refused: the body is broken) or closed, but not held.
		{"a token holder's body", "POST /v1/sandboxes/x/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + testToken + "\r\nContent-Length: 100\r\n\r\n",
			strings.Repeat("x", 100), ""},
		{"a token holder's upload", "PUT /v1/sandboxes/x/files?path=/tmp/f HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + testToken + "\r\nContent-Length: 100\r\n\r\n",
			strings.Repeat("x", 100), ""},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, c.head); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			defer close(stop)
			go drip(conn, c.body, stop)
			start := time.Now()
			got := answerWithin(conn, bound)
			if got == "" || !strings.HasPrefix(got, c.want) {
				if got == "" {
					got = "nothing"
				}
				t.Errorf("got %s after %s, want %s within %s", got, time.Since(start).Round(time.Millisecond), c.want, bound)
			}
		})
	}
	// A kept-alive connection with nothing more to ask is closed.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /v1/health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", testToken)
	conn.SetReadDeadline(time.Now().Add(bound))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	start := time.Now()
	if _, err := conn.Read(make([]byte, 1)); err == nil || time.Since(start) >= bound-time.Second {
		t.Errorf("an idle connection: %v after %s", err, time.Since(start))
	}
}

// TestConnectionCap: at most MaxConns connections are served at once;
// the next waits until one ends.
func TestConnectionCap(t *testing.T) {
	addr := serveTCP(t, Bounds{MaxConns: 3, HeaderTimeout: 20 * time.Second})
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	health := func(d time.Duration) error {
		hc := &http.Client{Timeout: d, Transport: &http.Transport{DisableKeepAlives: true}}
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/health", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	if err := health(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	if err := health(time.Second); err == nil {
		t.Fatal("a fourth connection was served beside three")
	}
	held[0].Close()
	if err := health(10 * time.Second); err != nil {
		t.Errorf("once one of three closed: %v", err)
	}
}

// TestSlowReader: a token holder that stops reading a long answer (a
// session's log, here) is cut off, not waited for.
func TestSlowReader(t *testing.T) {
	s := New(Config{Store: t.TempDir(), Tokens: map[string]string{testToken: "t"}, Tenants: t.TempDir()})
	rec, err := s.st.Create("big", "t")
	if err != nil {
		t.Fatal(err)
	}
	const size = 64 << 20
	if err := os.WriteFile(s.st.LogPath(rec.ID), make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := serveOn(t, s, Bounds{WriteTimeout: time.Second})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /v1/sandboxes/%s/logs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", rec.ID, testToken)
	time.Sleep(4 * time.Second) // not reading
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	n, err := io.Copy(io.Discard, conn)
	if n >= size {
		t.Errorf("a client that stopped reading got all %d bytes (%v)", n, err)
	}
}
