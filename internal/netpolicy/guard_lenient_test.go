package netpolicy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/internal/nettest"
)

// The class: whatever a common server reads as an HTTP request is checked
// as one, or refused; only bytes no server takes for HTTP pass, and only
// to a name allowed raw. The servers' lenient readings: Go's net/http
// takes a method of any length, Python's http.server splits the request
// line on any white space (a tab too) and takes any first word.
var lenientAttacks = []struct{ name, in string }{
	{"long method", strings.Repeat("A", 40) + " /secret HTTP/1.1\r\nHost: bad.test\r\n\r\n"},
	{"method of 32", strings.Repeat("M", 32) + " /secret HTTP/1.1\r\nHost: bad.test\r\n\r\n"},
	{"tab separators", "GET\t/secret\tHTTP/1.1\r\nHost: bad.test\r\n\r\n"},
	{"tab after the method", "GET\t/secret HTTP/1.1\r\nHost: bad.test\r\n\r\n"},
	{"vertical tab separators", "GET\v/secret\vHTTP/1.1\r\nHost: bad.test\r\n\r\n"},
	{"unknown method, tabs", "FROB\t/secret\tHTTP/1.1\r\nHost: bad.test\r\n\r\n"},
	{"lower case version", "FROB /secret http/1.1\r\nHost: bad.test\r\n\r\n"},
	{"long method, then a second request", strings.Repeat("A", 40) + " / HTTP/1.1\r\nHost: ok.test\r\n\r\nGET /secret HTTP/1.1\r\nHost: bad.test\r\n\r\n"},
	{"kelvin sign host", "GET /secret HTTP/1.1\r\nHost: o\u212a.test\r\n\r\n"},
	{"kelvin sign in the URL", "GET http://o\u212a.test/secret HTTP/1.1\r\nHost: ok.test\r\n\r\n"},
	{"non-ASCII host", "GET /secret HTTP/1.1\r\nHost: ok.test\u00e9\r\n\r\n"},
	{"control byte in the target", "GET /\x01 HTTP/1.1\r\nHost: bad.test\r\n\r\n"},
	{"h2c prior knowledge", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"},
	{"h2c upgrade", "GET / HTTP/1.1\r\nHost: ok.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n"},
	{"h2c upgrade without Connection", "GET / HTTP/1.1\r\nHost: ok.test\r\nUpgrade: h2c\r\n\r\n"},
	{"HTTP/0.9", "GET /secret\r\n"},
	{"good, then a long method", "GET / HTTP/1.1\r\nHost: ok.test\r\n\r\n" + strings.Repeat("A", 40) + " /secret HTTP/1.1\r\nHost: bad.test\r\n\r\n"},
	{"good, then tabs", "GET / HTTP/1.1\r\nHost: ok.test\r\n\r\nGET\t/secret\tHTTP/1.1\r\nHost: bad.test\r\n\r\n"},
	{"good, then h2c", "GET / HTTP/1.1\r\nHost: ok.test\r\n\r\nPRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"},
	{"space, then a request", "  GET /secret HTTP/1.1\r\nHost: bad.test\r\n\r\n"},
}

func TestGuardLenientRequestLines(t *testing.T) {
	for _, raw := range []bool{false, true} {
		for _, c := range lenientAttacks {
			for _, piece := range []int{1, 5, 1 << 20} {
				g := &Guard{Allowed: allowOnly("ok.test"), Raw: raw}
				out, err := feedTo(g, []byte(c.in), piece)
				if err == nil {
					t.Errorf("%s (raw %v, pieces of %d): not refused, passed %q", c.name, raw, piece, out)
				}
				if bytes.Contains(out, []byte("secret")) {
					t.Errorf("%s (raw %v, pieces of %d): passed %q", c.name, raw, piece, out)
				}
			}
		}
	}
}

// Bytes that are neither TLS nor HTTP pass only with Raw, and what a
// lenient server reads as HTTP is checked even then.
func TestGuardRaw(t *testing.T) {
	for _, c := range []struct {
		name, in  string
		strict    bool // passes without Raw
		passesRaw bool
	}{
		{"ssh", "SSH-2.0-OpenSSH_9.2p1 Debian-2\r\nmore", refused, ok},
		{"ssh, no comment", "SSH-2.0-OpenSSH_9.6\r\n", refused, ok},
		{"postgres", "\x00\x00\x00\x08\x04\xd2\x16\x2f", refused, ok},
		{"redis", "*1\r\n$4\r\nPING\r\n", refused, ok},
		{"smtp", "EHLO client.test\r\n", refused, ok},
		{"json", `{"op":"hello"}` + "\n", refused, ok},
		{"good request", "GET / HTTP/1.1\r\nHost: ok.test\r\n\r\n", ok, ok},
		{"bad request", "GET / HTTP/1.1\r\nHost: bad.test\r\n\r\n", refused, refused},
		{"text with HTTP/ in its first line", "HELLO there HTTP/1.1\r\n\r\n", refused, refused},
		{"a method and anything", "GET me\r\n", refused, refused},
		{"memcached", "get key\r\n", refused, ok},
		{"lower case method with a version", "get / http/1.1\r\nHost: bad.test\r\n\r\n", refused, refused},
		{"a line past the bound", "X " + strings.Repeat("a", HeadMax+10), refused, refused},
	} {
		for _, raw := range []bool{false, true} {
			want := c.strict
			if raw {
				want = c.passesRaw
			}
			for _, piece := range []int{1, 3, 1 << 20} {
				out, err := feedTo(&Guard{Allowed: allowOnly("ok.test"), Raw: raw}, []byte(c.in), piece)
				if want && (err != nil || string(out) != c.in) {
					t.Errorf("%s (raw %v, pieces of %d): refused %v, passed %d of %d bytes", c.name, raw, piece, err, len(out), len(c.in))
				}
				if !want && err == nil {
					t.Errorf("%s (raw %v, pieces of %d): not refused (passed %q)", c.name, raw, piece, out)
				}
			}
		}
	}
	// Nothing goes before the check, the empty lines servers skip
	// neither.
	for _, piece := range []int{1, 1 << 20} {
		if out, err := feedTo(&Guard{Allowed: allowOnly("ok.test")}, []byte("\r\n\r\n\x00\x01"), piece); err == nil || len(out) != 0 {
			t.Errorf("empty lines, then binary (pieces of %d): passed %q, %v", piece, out, err)
		}
	}
	// A binary protocol is refused at its first byte: nothing waits for
	// a line end it never sends.
	g := &Guard{Allowed: allowOnly("ok.test")}
	if _, err := g.Feed([]byte{0, 0, 0, 8}); err == nil || !strings.Contains(err.Error(), "tcp:") {
		t.Errorf("binary without Raw: %v", err)
	}
}

// A head sent a byte at a time is not scanned again for every byte: the
// guard runs in the helper all sandboxes share, and a 56 KiB head of
// short lines cost it 10 s of CPU.
func TestGuardByteAtATime(t *testing.T) {
	for _, in := range []string{
		"GET / HTTP/1.1\r\n" + strings.Repeat("X-A: b\r\n", 7000) + "Host: ok.test\r\n\r\n",
		"GET /" + strings.Repeat("a", 60000) + " HTTP/1.1\r\nHost: ok.test\r\n\r\n",
		strings.Repeat("\r\n", 500) + "GET / HTTP/1.1\r\nHost: ok.test\r\n\r\n",
	} {
		start := time.Now()
		out, err := feed(allowOnly("ok.test"), []byte(in), 1)
		if err != nil || string(out) != in {
			t.Errorf("%d bytes: refused %v", len(in), err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%d bytes a byte at a time took %v", len(in), d)
		}
	}
	// The bounds on what comes before a request line.
	for _, in := range []string{
		strings.Repeat("\r\n", wordMax) + "GET / HTTP/1.1\r\nHost: ok.test\r\n\r\n",
		strings.Repeat("A", wordMax+1) + " / HTTP/1.1\r\nHost: ok.test\r\n\r\n",
	} {
		for _, raw := range []bool{false, true} {
			if out, err := feedTo(&Guard{Allowed: allowOnly("ok.test"), Raw: raw}, []byte(in), 1<<20); err == nil || len(out) != 0 {
				t.Errorf("%.20q... (raw %v): passed %d bytes, %v", in, raw, len(out), err)
			}
		}
	}
}

// A TLS hello or another protocol's first bytes pass unread, except their
// first line: a server that takes any word for a method reads a hello
// with " /x HTTP/1.1" in an extension as a request (the e2e test shows
// Python's), and keeps the connection for the next.
func TestGuardFirstLineOfOtherProtocols(t *testing.T) {
	attack := " /secret HTTP/1.1\r\nHost: bad.test\r\n\r\n"
	hello := nettest.LenientHello("ok.test", attack)
	if name, ech, more := tlsHello(hello); name != "ok.test" || ech || more {
		t.Fatalf("the crafted hello does not parse: %q %v %v", name, ech, more)
	}
	for _, raw := range []bool{false, true} {
		for _, piece := range []int{1, 7, 1 << 20} {
			out, err := feedTo(&Guard{Allowed: allowOnly("ok.test"), Raw: raw}, hello, piece)
			if err == nil || bytes.Contains(out, []byte("\n")) {
				t.Errorf("a hello with a request line (raw %v, pieces of %d): passed %q, %v", raw, piece, out, err)
			}
		}
	}
	// The line may go on after the hello, in what follows it (a hello
	// without a line feed: no length in it is 10).
	plain := nettest.LenientHello("www.ok.test", "")
	if bytes.IndexByte(plain, '\n') >= 0 {
		t.Fatalf("a line feed in the hello: %q", plain)
	}
	for _, piece := range []int{1, 1 << 20} {
		out, err := feedTo(&Guard{Allowed: allowOnly("www.ok.test")}, append(plain, attack...), piece)
		if err == nil || bytes.Contains(out, []byte("\n")) {
			t.Errorf("a request line after the hello (pieces of %d): passed %q, %v", piece, out, err)
		}
	}
	// Another protocol's first line, allowed raw.
	out, err := feedTo(&Guard{Allowed: allowOnly("ok.test"), Raw: true}, []byte("\x00\x01"+attack), 1<<20)
	if err == nil || len(out) != 0 {
		t.Errorf("binary, then a request line: passed %q, %v", out, err)
	}
	// Past the longest request line a server reads, the watch ends: a
	// database's first 64 KiB without a line feed may hold "HTTP/" after.
	long := append(bytes.Repeat([]byte{0}, lineMax), " HTTP/1.1 x"...)
	for _, piece := range []int{1000, 1 << 20} {
		if out, err := feedTo(&Guard{Allowed: allowOnly("ok.test"), Raw: true}, long, piece); err != nil || !bytes.Equal(out, long) {
			t.Errorf("HTTP/ past the longest line (pieces of %d): %v", piece, err)
		}
	}
	// A browser's hello names "http/1.1" (ALPN): it passes, and once its
	// first line ended, so does what follows.
	alpn := clientHelloALPN(t, "ok.test", "h2", "http/1.1")
	rest := append(append([]byte(nil), alpn...), "\n HTTP/1.1 anything"...)
	if out, err := feed(allowOnly("ok.test"), rest, 1<<20); err != nil || !bytes.Equal(out, rest) {
		t.Errorf("a hello with ALPN: %v", err)
	}
}

// clientHelloALPN is clientHello offering the protocols protos.
func clientHelloALPN(t testing.TB, name string, protos ...string) []byte {
	t.Helper()
	c, s := net.Pipe()
	go func() {
		tc := tls.Client(c, &tls.Config{ServerName: name, InsecureSkipVerify: true, NextProtos: protos})
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
	if !bytes.Contains(b[:n], []byte("http/1.1")) {
		t.Fatal("no ALPN in the hello")
	}
	return b[:n]
}

func TestGuardNonASCIIServerName(t *testing.T) {
	// "okkk.test" and "o\u212a.test" have the same length: swap them in a
	// real client's hello.
	hello := clientHello(t, "okkk.test")
	i := bytes.Index(hello, []byte("okkk.test"))
	if i < 0 {
		t.Fatal("no server name in the hello")
	}
	kelvin := append([]byte(nil), hello...)
	copy(kelvin[i:], "o\u212a.test")
	if _, err := feed(allowOnly("ok.test"), kelvin, 1<<20); err == nil {
		t.Error("a server name with a Kelvin sign passed as ok.test")
	}
	if _, err := feed(allowOnly("okkk.test"), hello, 1<<20); err != nil {
		t.Errorf("the ASCII name: %v", err)
	}
}

// A Host that is an address, even the one an allowed name resolved to,
// passes only where an --allow address or CIDR covers it: without the
// name the server picks its default site, which need not be the allowed
// one.
func TestGuardAddressHost(t *testing.T) {
	rules, err := ParseRules([]string{"ok.test", "198.51.100.0/24"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := NewPolicy(Config{Mode: Allow, Rules: rules})
	a := netip.MustParseAddr("203.0.113.5")
	p.Learn("ok.test", []netip.Addr{a})
	dst := netip.AddrPortFrom(a, 80)
	d := p.Decide("tcp", dst)
	for _, c := range []struct {
		host string
		pass bool
	}{
		{"ok.test", ok},
		{"203.0.113.5", refused},
		{"203.0.113.5:80", refused},
		{"[::ffff:203.0.113.5]", refused},
		{"198.51.100.7", ok},
	} {
		in := "GET / HTTP/1.1\r\nHost: " + c.host + "\r\n\r\n"
		_, err := feedTo(p.Guard(dst, d), []byte(in), 1<<20)
		if (err == nil) != c.pass {
			t.Errorf("Host %s: %v", c.host, err)
		}
	}
}

// Raw comes from a "tcp:" entry whose name the address was learned from,
// and a deny entry takes it back.
func TestPolicyRawEntries(t *testing.T) {
	rules, err := ParseRules([]string{"ok.test", "TCP:git.test", "tcp:*.db.test"}, []string{"x.db.test"})
	if err != nil {
		t.Fatal(err)
	}
	p := NewPolicy(Config{Mode: Allow, Rules: rules})
	addrs := map[string]netip.Addr{
		"ok.test":   netip.MustParseAddr("203.0.113.1"),
		"git.test":  netip.MustParseAddr("203.0.113.2"),
		"a.db.test": netip.MustParseAddr("203.0.113.3"),
		"x.db.test": netip.MustParseAddr("203.0.113.4"),
	}
	for name, a := range addrs {
		if ok, _, _ := p.NameVerdict(name); ok || name != "x.db.test" {
			p.Learn(name, []netip.Addr{a})
		}
	}
	for name, want := range map[string]bool{"ok.test": false, "git.test": true, "a.db.test": true} {
		dst := netip.AddrPortFrom(addrs[name], 22)
		d := p.Decide("tcp", dst)
		if !d.OK || !d.Inspect {
			t.Fatalf("%s: %+v", name, d)
		}
		_, err := feedTo(p.Guard(dst, d), []byte("SSH-2.0-OpenSSH_9.6\r\n"), 1<<20)
		if (err == nil) != want {
			t.Errorf("ssh to %s: %v", name, err)
		}
		// HTTP is still checked on a raw name's addresses.
		if _, err := feedTo(p.Guard(dst, d), []byte("GET / HTTP/1.1\r\nHost: bad.test\r\n\r\n"), 1<<20); err == nil {
			t.Errorf("%s: a request for bad.test passed", name)
		}
	}
	if rules.RawTCP("x.db.test") {
		t.Error("a denied name is raw")
	}
	for _, bad := range [][2][]string{
		{{"tcp:192.0.2.1"}, nil},
		{{"tcp:10.0.0.0/8"}, nil},
		{{"tcp:"}, nil},
		{{"ok.test"}, {"tcp:ok.test"}},
	} {
		if _, err := ParseRules(bad[0], bad[1]); err == nil {
			t.Errorf("allow %q deny %q: accepted", bad[0], bad[1])
		}
	}
}

// FuzzGuardVsNetHTTP feeds arbitrary bytes to the guard, after nothing,
// one allowed request or one with a body (so that they are also the
// second request on a connection), strict and raw, whole and in pieces,
// and reads what it passed with net/http's own parser: no request Go
// reads from it may name a host other than the allowed one, or none.
func FuzzGuardVsNetHTTP(f *testing.F) {
	for _, c := range lenientAttacks {
		f.Add([]byte(c.in), uint8(0), false, uint8(7))
		f.Add([]byte(c.in), uint8(1), true, uint8(1))
	}
	f.Add(nettest.LenientHello("ok.test", " /secret HTTP/1.1\r\nHost: bad.test\r\n\r\n"), uint8(0), false, uint8(9))
	for _, s := range []string{
		"POST / HTTP/1.1\r\nHost: ok.test\r\nTransfer-Encoding: chunked\r\n\r\n1a;x / HTTP/1.1\r\nHost: bad.test\r\n\r\nxxxxxxxx\r\n0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: ok.test\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: ok.test\r\n\r\nGET / HTTP/1.1\r\nHost: bad.test\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: ok.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: bad.test\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: ok.test\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\nHost: bad.test\r\n\r\n",
		"GET http://bad.test/ HTTP/1.1\r\nHost: ok.test\r\n\r\n",
		"SSH-2.0-x\r\nGET / HTTP/1.1\r\nHost: bad.test\r\n\r\n",
		"\x00\x01GET / HTTP/1.1\r\nHost: bad.test\r\n\r\n",
	} {
		f.Add([]byte(s), uint8(0), true, uint8(3))
	}
	prefixes := []string{
		"",
		"GET / HTTP/1.1\r\nHost: ok.test\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: ok.test:80\r\nContent-Length: 2\r\n\r\nhi",
	}
	f.Fuzz(func(t *testing.T, in []byte, prefix uint8, raw bool, piece uint8) {
		if len(in) > 8<<10 {
			t.Skip("over 8 KiB: slow a byte at a time; TestGuardByteAtATime checks large heads")
		}
		stream := append([]byte(prefixes[int(prefix)%len(prefixes)]), in...)
		whole, werr := feedTo(&Guard{Allowed: allowOnly("ok.test"), Raw: raw}, stream, len(stream)+1)
		parts, perr := feedTo(&Guard{Allowed: allowOnly("ok.test"), Raw: raw}, stream, int(piece)%64+1)
		// In pieces, a refused stream may have passed more of a first
		// line that had not ended (see Guard.firstLine).
		if !bytes.HasPrefix(stream, whole) || !bytes.HasPrefix(stream, parts) || (werr == nil) != (perr == nil) || werr == nil && !bytes.Equal(whole, parts) {
			t.Fatalf("whole and in pieces differ, or passed what was not given: %q %v / %q %v", whole, werr, parts, perr)
		}
		for _, p := range [][]byte{whole, parts} {
			servedHosts(t, p)
			for _, h := range pythonReads(p) {
				if servedHost(h) != "ok.test" {
					t.Fatalf("Python's http.server reads a request for %q in what passed: %q", h, p)
				}
			}
		}
	})
}

// pythonReads returns the Host ("" for none) of each request Python's
// http.server (3.11, BaseHTTPRequestHandler) serves from b with a handler
// for every method that reads a Content-Length body, keeping the
// connection as it does: its request line is split on any white space
// (str.split, the bytes read as Latin-1), takes any first word for the
// method, wants "HTTP/d.d" as a third word or "GET" and a path alone
// (HTTP/0.9, whose headers it still reads), and its header lines end at a
// bare line feed too. An oracle for the fuzz target, not a server.
func pythonReads(b []byte) []string {
	var hosts []string
	white := func(r rune) bool {
		return r == ' ' || r >= '\t' && r <= '\r' || r >= 0x1c && r <= 0x1f || r == 0x85 || r == 0xa0
	}
	line := func() (string, bool) {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return "", false // the server waits: nothing served
		}
		l := b[:i+1]
		b = b[i+1:]
		r := make([]rune, len(l)) // Latin-1
		for j, c := range l {
			r[j] = rune(c)
		}
		return string(r), true
	}
	for range 64 {
		l, ok := line()
		if !ok {
			return hosts
		}
		words := strings.FieldsFunc(strings.TrimRight(l, "\r\n"), white)
		keep := false
		switch {
		case len(words) == 3:
			v, ok := strings.CutPrefix(words[2], "HTTP/")
			major, minor, dot := strings.Cut(v, ".")
			if !ok || !dot || strings.Trim(major, "0123456789") != "" || strings.Trim(minor, "0123456789") != "" || major == "" || minor == "" {
				return hosts
			}
			if major >= "2" && len(major) == 1 || len(major) > 1 {
				return hosts // 505
			}
			keep = minor != "0" && major == "1"
		case len(words) == 2 && words[0] == "GET":
		default:
			return hosts // 400, and the connection closes
		}
		host, length := "", 0
		for n := 0; ; n++ {
			h, ok := line()
			if !ok || n > 100 {
				return hosts
			}
			if h == "\r\n" || h == "\n" {
				break
			}
			name, value, _ := strings.Cut(h, ":")
			value = strings.TrimSpace(value)
			switch strings.ToLower(name) {
			case "host":
				if host == "" {
					host = value
					if host == "" {
						host = "(empty)"
					}
				}
			case "content-length":
				length, _ = strconv.Atoi(value)
			case "connection":
				if strings.EqualFold(value, "close") {
					keep = false
				}
			}
		}
		hosts = append(hosts, host)
		if !keep || length < 0 || length > len(b) {
			return hosts
		}
		b = b[length:]
	}
	return hosts
}

// servedHosts reads what passed with net/http's parser: every request it
// reads must be for ok.test.
func servedHosts(t *testing.T, whole []byte) {
	br := bufio.NewReader(bytes.NewReader(whole))
	for range 64 {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if h := servedHost(req.Host); h != "ok.test" {
			t.Fatalf("net/http reads a request for %q in what passed: %q", req.Host, whole)
		}
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return
		}
	}
}

// servedHost drops a port; the name is compared as the server has it (no
// case folding beyond ASCII, no trailing dot).
func servedHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.TrimSuffix(lowerASCII(h), ".")
}
