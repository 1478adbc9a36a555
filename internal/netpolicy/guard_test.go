package netpolicy

import (
	"bytes"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"
)

// clientHello returns the first bytes a real TLS client sends for name.
func clientHello(t testing.TB, name string) []byte {
	t.Helper()
	c, s := net.Pipe()
	go func() {
		tc := tls.Client(c, &tls.Config{ServerName: name, InsecureSkipVerify: true})
		tc.SetDeadline(time.Now().Add(20 * time.Second))
		tc.Handshake()
		c.Close()
	}()
	b := make([]byte, 16<<10)
	s.SetReadDeadline(time.Now().Add(20 * time.Second))
	n, err := s.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	return b[:n]
}

// recordsOf re-frames the handshake bytes of a one-record ClientHello as
// several records, cut at the given offsets into the handshake message.
func recordsOf(hello []byte, cuts ...int) []byte {
	msg := hello[5 : 5+int(be.Uint16(hello[3:]))]
	var out []byte
	prev := 0
	for _, c := range append(cuts, len(msg)) {
		out = append(out, 0x16, hello[1], hello[2], byte((c-prev)>>8), byte(c-prev))
		out = append(out, msg[prev:c]...)
		prev = c
	}
	return out
}

// allowOnly lets through the names in the list.
func allowOnly(names ...string) func(string) bool {
	return func(h string) bool {
		for _, n := range names {
			if h == n {
				return true
			}
		}
		return false
	}
}

// feed runs the whole of in through a guard in pieces of size n and
// returns what passed and the refusal.
func feed(allowed func(string) bool, in []byte, n int) ([]byte, error) {
	return feedTo(&Guard{Allowed: allowed}, in, n)
}

// feedTo is feed with a guard of the caller's.
func feedTo(g *Guard, in []byte, n int) ([]byte, error) {
	var out []byte
	for len(in) > 0 {
		k := min(n, len(in))
		p, err := g.Feed(in[:k])
		out = append(out, p...)
		if err != nil {
			return out, err
		}
		in = in[k:]
	}
	return out, nil
}

const ok, refused = true, false

func TestGuardHTTP(t *testing.T) {
	allowed := allowOnly("api.example.org", "192.0.2.7")
	big := strings.Repeat("X-Pad: "+strings.Repeat("a", 1000)+"\r\n", 70) // ~70 KiB
	for _, c := range []struct {
		name string
		in   string
		pass bool
	}{
		{"allowed", "GET / HTTP/1.1\r\nHost: api.example.org\r\n\r\n", ok},
		{"allowed with port and case", "GET / HTTP/1.1\r\nhOsT:  API.Example.org:8080 \r\n\r\n", ok},
		{"allowed address literal", "GET / HTTP/1.0\r\nHost: 192.0.2.7\r\n\r\n", ok},
		{"other name", "GET / HTTP/1.1\r\nHost: other.example.org\r\n\r\n", refused},
		{"no host", "GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", refused},
		{"http/1.0 without host", "GET / HTTP/1.0\r\n\r\n", refused},
		{"http/0.9", "GET /\r\n", refused},
		{"two hosts", "GET / HTTP/1.1\r\nHost: api.example.org\r\nHost: other.example.org\r\n\r\n", refused},
		{"two hosts, same", "GET / HTTP/1.1\r\nHost: api.example.org\r\nHost: api.example.org\r\n\r\n", refused},
		{"headers past the bound before host", "GET / HTTP/1.1\r\n" + big + "Host: api.example.org\r\n\r\n", refused},
		{"absolute URI for another host", "GET http://other.example.org/x HTTP/1.1\r\nHost: api.example.org\r\n\r\n", refused},
		{"absolute URI, same host", "GET http://api.example.org:80/x HTTP/1.1\r\nHost: api.example.org\r\n\r\n", ok},
		{"absolute URI, other scheme", "GET ftp://api.example.org/ HTTP/1.1\r\nHost: api.example.org\r\n\r\n", refused},
		{"connect", "CONNECT other.example.org:443 HTTP/1.1\r\nHost: api.example.org\r\n\r\n", refused},
		{"h2 prior knowledge", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", refused},
		{"h2c upgrade", "GET / HTTP/1.1\r\nHost: api.example.org\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n\r\n", refused},
		{"folded host", "GET / HTTP/1.1\r\nHost: api.example.org\r\n other.example.org\r\n\r\n", refused},
		{"space before colon", "GET / HTTP/1.1\r\nHost : other.example.org\r\n\r\n", refused},
		{"userinfo in host", "GET / HTTP/1.1\r\nHost: api.example.org@other.example.org\r\n\r\n", refused},
		{"bad port", "GET / HTTP/1.1\r\nHost: api.example.org:99999\r\n\r\n", refused},
		{"bare LF", "GET / HTTP/1.1\nHost: api.example.org\n\n", refused},
		{"bare LF inside", "GET / HTTP/1.1\r\nX: a\nHost: other.example.org\r\nHost: api.example.org\r\n\r\n", refused},
		{"CL and TE", "POST / HTTP/1.1\r\nHost: api.example.org\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", refused},
		{"two lengths", "POST / HTTP/1.1\r\nHost: api.example.org\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcd", refused},
		{"bad length", "POST / HTTP/1.1\r\nHost: api.example.org\r\nContent-Length: +4\r\n\r\nabcd", refused},
		{"TE not chunked last", "POST / HTTP/1.1\r\nHost: api.example.org\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", refused},
		{"two requests kept alive", "GET / HTTP/1.1\r\nHost: api.example.org\r\n\r\nGET / HTTP/1.1\r\nHost: api.example.org\r\n\r\n", ok},
		{"second request for another host", "GET / HTTP/1.1\r\nHost: api.example.org\r\n\r\nGET /secret HTTP/1.1\r\nHost: other.example.org\r\n\r\n", refused},
		{"request hidden in a body", "POST / HTTP/1.1\r\nHost: api.example.org\r\nContent-Length: 47\r\n\r\nGET / HTTP/1.1\r\nHost: other.example.org\r\n\r\n", ok},
		{"request after a body", "POST / HTTP/1.1\r\nHost: api.example.org\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\nHost: other.example.org\r\n\r\n", refused},
		{"chunked then another", "POST / HTTP/1.1\r\nHost: api.example.org\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: other.example.org\r\n\r\n", refused},
		{"chunked then same", "POST / HTTP/1.1\r\nHost: api.example.org\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\nGET / HTTP/1.1\r\nHost: api.example.org\r\n\r\n", ok},
		{"chunk extension", "POST / HTTP/1.1\r\nHost: api.example.org\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\n\r\n", refused},
		{"chunk without CRLF", "POST / HTTP/1.1\r\nHost: api.example.org\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXX0\r\n\r\n", refused},
		{"bad chunk size", "POST / HTTP/1.1\r\nHost: api.example.org\r\nTransfer-Encoding: chunked\r\n\r\n-3\r\nabc\r\n", refused},
		{"empty lines before", "\r\n\r\nGET / HTTP/1.1\r\nHost: api.example.org\r\n\r\n", ok},
		{"websocket upgrade", "GET /ws HTTP/1.1\r\nHost: api.example.org\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", ok},
		{"custom method", "PROPFIND / HTTP/1.1\r\nHost: other.example.org\r\n\r\n", refused},
		{"lower case method", "get / HTTP/1.1\r\nHost: other.example.org\r\n\r\n", refused},
		// Lenient servers (Python's http.server) strip whitespace around
		// the request line: such a request is checked, not passed as a
		// protocol that names no server.
		{"space before the method", " GET /K HTTP/1.1\r\nHost: other.example.org\r\n\r\n", refused},
		{"tab before the method", "\tGET /K HTTP/1.1\r\nHost: other.example.org\r\n\r\n", refused},
		{"vertical tab before the method", "\vGET /K HTTP/1.1\r\nHost: other.example.org\r\n\r\n", refused},
		{"file separator before the method", "\x1cGET /K HTTP/1.1\r\nHost: other.example.org\r\n\r\n", refused},
		{"NBSP before the method", "\xa0GET /K HTTP/1.1\r\nHost: other.example.org\r\n\r\n", refused},
		{"spaces and CRLF before the method", "  \r\nGET /K HTTP/1.1\r\nHost: other.example.org\r\n\r\n", refused},
		{"space before the second request", "GET / HTTP/1.1\r\nHost: api.example.org\r\n\r\n GET /K HTTP/1.1\r\nHost: other.example.org\r\n\r\n", refused},
		// Neither TLS nor HTTP: refused unless the name is allowed
		// raw (TestGuardRaw).
		{"ssh", "SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n", refused},
		{"binary protocol", "\x00\x00\x00\x08\x04\xd2\x16\x2f", refused},
		{"redis", "*1\r\n$4\r\nPING\r\n", refused},
	} {
		for _, piece := range []int{1, 7, 1 << 20} {
			out, err := feed(allowed, []byte(c.in), piece)
			if c.pass && (err != nil || !bytes.Equal(out, []byte(c.in))) {
				t.Errorf("%s (pieces of %d): refused %v, passed %d of %d bytes", c.name, piece, err, len(out), len(c.in))
			}
			if !c.pass && err == nil {
				t.Errorf("%s (pieces of %d): not refused (passed %d of %d bytes)", c.name, piece, len(out), len(c.in))
			}
			if !c.pass && bytes.Contains(out, []byte("other.example.org")) {
				t.Errorf("%s (pieces of %d): a refused request reached the server: %q", c.name, piece, out)
			}
		}
	}
}

func TestGuardPassesNothingBeforeTheCheck(t *testing.T) {
	g := &Guard{Allowed: allowOnly("api.example.org")}
	out, err := g.Feed([]byte("GET /secret HTTP/1.1\r\nHost: api.exa"))
	if err != nil || len(out) != 0 {
		t.Fatalf("a partial head: %q %v", out, err)
	}
	out, err = g.Feed([]byte("mple.org\r\n\r\n"))
	if err != nil || string(out) != "GET /secret HTTP/1.1\r\nHost: api.example.org\r\n\r\n" {
		t.Fatalf("the completed head: %q %v", out, err)
	}
}

func TestGuardUpgrade(t *testing.T) {
	req := "GET /ws HTTP/1.1\r\nHost: api.example.org\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
	for _, c := range []struct {
		status string
		next   string
		pass   bool
	}{
		{"HTTP/1.1 101 Switching Protocols", "GET / HTTP/1.1\r\nHost: other.example.org\r\n\r\n", ok}, // websocket frames now
		{"HTTP/1.1 400 Bad Request", "GET / HTTP/1.1\r\nHost: other.example.org\r\n\r\n", refused},
		{"HTTP/1.1 400 Bad Request", "GET / HTTP/1.1\r\nHost: api.example.org\r\n\r\n", ok},
	} {
		g := &Guard{Allowed: allowOnly("api.example.org")}
		out, err := g.Feed([]byte(req + c.next))
		if err != nil || string(out) != req || !g.Waiting() {
			t.Fatalf("upgrade request: %q %v waiting %v", out, err, g.Waiting())
		}
		g.Response([]byte(c.status))
		out, err = g.Feed(nil)
		if c.pass && (err != nil || string(out) != c.next) || !c.pass && err == nil {
			t.Errorf("after %q: %q %v", c.status, out, err)
		}
	}
}

func TestGuardTLS(t *testing.T) {
	allowed := allowOnly("registry.example.org")
	hello := clientHello(t, "Registry.Example.org")
	if out, err := feed(allowed, hello, 1<<20); err != nil || !bytes.Equal(out, hello) {
		t.Errorf("allowed name: %v", err)
	}
	// The rest of a TLS stream is opaque.
	g := &Guard{Allowed: allowed}
	g.Feed(hello)
	if out, err := g.Feed([]byte("GET / HTTP/1.1\r\nHost: other\r\n\r\n")); err != nil || len(out) == 0 {
		t.Errorf("after the hello: %q %v", out, err)
	}
	other := clientHello(t, "other.example.org")
	if _, err := feed(allowed, other, 1<<20); err == nil {
		t.Error("other name passed")
	}
	noSNI := clientHello(t, "")
	if _, err := feed(allowed, noSNI, 1<<20); err == nil {
		t.Error("a hello without a server name passed")
	}
	// A hello split over several records still shows its name; each
	// proper prefix waits for more and passes nothing.
	for _, cuts := range [][]int{{2}, {60}, {100, 101, 102}, {0, 50}} {
		b := recordsOf(other, cuts...)
		if _, err := feed(allowed, b, 1<<20); err == nil {
			t.Errorf("hello cut at %v: other name passed", cuts)
		}
		b = recordsOf(hello, cuts...)
		if out, err := feed(allowed, b, 3); err != nil || !bytes.Equal(out, b) {
			t.Errorf("hello cut at %v: %v", cuts, err)
		}
	}
	// Truncated, or too large to check: refused when the stream ends or
	// the bound is passed.
	g = &Guard{Allowed: allowed}
	if out, err := g.Feed(hello[:len(hello)-1]); err != nil || len(out) != 0 {
		t.Errorf("a truncated hello: %q %v", out, err)
	}
	huge := append([]byte{0x16, 3, 1, 0xff, 0xff}, make([]byte, HeadMax+10)...)
	if _, err := feed(allowed, huge, 4096); err == nil {
		t.Error("a hello past the bound passed")
	}
}

func TestGuardECH(t *testing.T) {
	// A hello with an encrypted_client_hello extension hides its real
	// name behind the public one: refused.
	hello := clientHello(t, "registry.example.org")
	withECH := addExtension(t, hello, extECH, []byte{0, 1, 2, 3})
	if _, err := feed(allowOnly("registry.example.org"), withECH, 1<<20); err == nil || !strings.Contains(err.Error(), "Encrypted Client Hello") {
		t.Errorf("ECH: %v", err)
	}
	twoNames := addExtension(t, hello, extServerName, append([]byte{0, 9, 0, 0, 6}, "a.test"...))
	if _, err := feed(allowOnly("registry.example.org", "a.test"), twoNames, 1<<20); err == nil {
		t.Error("a hello with two server name extensions passed")
	}
}

// addExtension appends an extension to a one-record ClientHello.
func addExtension(t *testing.T, hello []byte, typ uint16, data []byte) []byte {
	t.Helper()
	h := append([]byte(nil), hello...)
	ext := append(be.AppendUint16(be.AppendUint16(nil, typ), uint16(len(data))), data...)
	// record length, handshake length, extensions length
	h = append(h, ext...)
	be.PutUint16(h[3:], be.Uint16(h[3:])+uint16(len(ext)))
	hl := int(h[6])<<16 | int(h[7])<<8 | int(h[8]) + len(ext)
	h[6], h[7], h[8] = byte(hl>>16), byte(hl>>8), byte(hl)
	// Find the extensions length: after version, random, session id,
	// cipher suites and compression methods.
	off := 9 + 34
	off += 1 + int(h[off])
	off += 2 + int(be.Uint16(h[off:]))
	off += 1 + int(h[off])
	be.PutUint16(h[off:], be.Uint16(h[off:])+uint16(len(ext)))
	return h
}

// FuzzGuard feeds arbitrary bytes, whole and in pieces: the guard never
// panics, never passes more than it was given, passes the same either
// way, and never lets a request for a name it did not allow through.
func FuzzGuard(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: api.example.org\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: api.example.org\r\n\r\nGET / HTTP/1.1\r\nHost: other.example.org\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: api.example.org\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: api.example.org\r\nContent-Length: 3\r\n\r\nabc",
		"SSH-2.0-x\r\n", "\x16\x03\x01\x00\x05\x01\x00\x00\x01\x00",
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, piece uint8) {
		allowed := allowOnly("api.example.org")
		whole, werr := feed(allowed, in, len(in)+1)
		parts, perr := feed(allowed, in, int(piece)%64+1)
		if len(whole) > len(in) || !bytes.HasPrefix(in, whole) || !bytes.HasPrefix(in, parts) {
			t.Fatalf("passed bytes that were not given, or out of order")
		}
		// In pieces, a refused stream may have passed more of a first
		// line that had not ended (see Guard.firstLine).
		if (werr == nil) != (perr == nil) || werr == nil && !bytes.Equal(whole, parts) {
			t.Fatalf("whole: %d bytes %v; in pieces: %d bytes %v", len(whole), werr, len(parts), perr)
		}
		// What passed, parsed as HTTP requests by the strictest reading,
		// names no other host.
		if bytes.Contains(bytes.ToLower(whole), []byte("host: other")) && bytes.HasPrefix(whole, []byte("GET ")) {
			t.Fatalf("a request for another host passed: %q", whole)
		}
	})
}
