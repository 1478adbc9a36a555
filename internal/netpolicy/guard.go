package netpolicy

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
)

// A Guard checks the names a connection from the sandbox asks a server
// for, in the bytes the client sends, before any of them reaches the
// server. It is used on connections to addresses that an allowed name
// resolved to: a server there may host other names too (a CDN, a shared
// host), and the TLS server name or HTTP Host picks among them.
//
// It fails closed: what it cannot parse within its bounds is refused.
//
//   - TLS: the ClientHello (joined across records, at most HeadMax bytes)
//     must carry a server name, allowed, and no Encrypted Client Hello;
//     the rest of the stream is the server's business (encrypted), once
//     its first line holds no "HTTP/" (see firstLine).
//   - HTTP/1: every request on the connection is checked, kept-alive and
//     pipelined ones included, read strictly ("METHOD SP target SP
//     HTTP/1.x", CRLF line ends): one Host header (none, two, a folded or
//     malformed one is refused), the same host as an absolute request
//     target, a head of at most HeadMax bytes, a body framed by
//     Content-Length or chunked encoding (without extensions) but not
//     both. CONNECT, HTTP/2
//     (prior knowledge or an h2c upgrade) are refused. A WebSocket
//     upgrade, once checked, turns the connection opaque when the server
//     answers 101 (Switching).
//   - Anything else is a protocol that names no server (SSH, a database).
//     It is refused unless Raw; with Raw it passes (the address check
//     alone applies) unless its first line is something a lenient server
//     would read as HTTP (see mayBeHTTP and firstLine). Bytes that start
//     like TLS or HTTP but break off or go wrong are refused.
//   - A non-ASCII Host or server name is refused: Unicode case folding
//     would make "oK.test" with a Kelvin sign "ok.test".
type Guard struct {
	// Allowed reports whether the connection may ask for host (a name,
	// lower case, or an address literal).
	Allowed func(host string) bool
	// Raw lets a protocol that is neither TLS nor HTTP through (the
	// policy allows the name as "tcp:NAME"); without it such bytes are
	// refused. Whatever a common server could read as HTTP is checked as
	// HTTP either way.
	Raw bool

	state    guardState
	buf      []byte // bytes seen but not yet passed
	body     int64  // bytes of the current body left to pass
	chunked  bool
	chunk    chunkState
	upgrade  bool   // the last request asked for a WebSocket upgrade
	requests bool   // a request passed: the connection speaks HTTP
	tail     []byte // gLine: the last bytes of the first line so far
	lineLen  int    // gLine: the first line's length so far
	// needLF: what is held can only be decided by a line end, so bytes
	// without one are not scanned again (a head sent a byte at a time
	// would cost the square of its length).
	needLF bool
	// scanned: how much of buf the search for the head's end has seen
	// (the search resumes there, less what a terminator could straddle).
	scanned int
}

// HeadMax bounds what the guard holds to parse one ClientHello or one
// HTTP request head.
const HeadMax = 64 << 10

// wordMax bounds a method, the first word of a protocol's first line, and
// the empty lines or white space before them: no client needs more, and
// the bound keeps their scan short while the rest of a line comes.
const wordMax = 1 << 10

type guardState int

const (
	gStart    guardState = iota // nothing seen yet
	gHead                       // reading an HTTP request head
	gBody                       // passing a body of known length
	gChunked                    // passing a chunked body
	gWaitResp                   // an upgrade request went out: nothing passes until the server answers
	gLine                       // TLS or another protocol: bytes pass, watched until the first line ends
	gOpaque                     // no more checks: TLS after its hello, a non-HTTP protocol, a WebSocket
	gRefused
)

// GuardError is why a guard refused a connection.
type GuardError struct {
	Name   string // the name the client asked for, when known
	Reason string
}

func (e *GuardError) Error() string {
	if e.Name != "" {
		return e.Reason + " (" + e.Name + ")"
	}
	return e.Reason
}

// errMore is Feed's "not enough bytes yet".
var errMore = errors.New("more")

// Feed takes the next bytes the client sent and returns how many of the
// bytes fed so far may go to the server now (those are dropped from the
// guard), or the refusal. Bytes it holds back are passed by later calls,
// once what follows them is known.
func (g *Guard) Feed(b []byte) (pass []byte, err error) {
	if g.state == gRefused {
		return nil, &GuardError{Reason: "refused earlier"}
	}
	if g.state == gOpaque && len(g.buf) == 0 {
		return b, nil
	}
	g.buf = append(g.buf, b...)
	if g.needLF && bytes.IndexByte(b, '\n') < 0 {
		if len(g.buf) > HeadMax {
			g.state = gRefused
			return nil, &GuardError{Reason: "the request head is larger than " + strconv.Itoa(HeadMax>>10) + " KiB: too large to check"}
		}
		return nil, nil
	}
	var out []byte
	for len(g.buf) > 0 {
		g.needLF = false
		n, err := g.step()
		if err == errMore {
			if len(g.buf) > HeadMax && (g.state == gStart || g.state == gHead) {
				g.state = gRefused
				return out, &GuardError{Reason: "the request head is larger than " + strconv.Itoa(HeadMax>>10) + " KiB: too large to check"}
			}
			break
		}
		if err != nil {
			g.state = gRefused
			return out, err
		}
		if n == 0 {
			break // waiting (for the server's answer to an upgrade)
		}
		out = append(out, g.buf[:n]...)
		g.buf = g.buf[n:]
		g.scanned = 0
	}
	if len(g.buf) == 0 {
		g.buf = nil
	}
	return out, nil
}

// Waiting reports whether the guard holds the client's bytes until the
// server answers (an upgrade request); the proxy then calls Response with
// the server's first bytes.
func (g *Guard) Waiting() bool { return g.state == gWaitResp }

// Response tells the guard the server's answer to an upgrade request: its
// status line. 101 makes the connection opaque; any other status goes back
// to checking requests.
func (g *Guard) Response(statusLine []byte) {
	if g.state != gWaitResp {
		return
	}
	f := strings.Fields(string(statusLine))
	if len(f) >= 2 && strings.HasPrefix(f[0], "HTTP/1.") && f[1] == "101" {
		g.state = gOpaque
		return
	}
	g.state = gHead
}

// step handles the start of g.buf and returns how many bytes may pass.
func (g *Guard) step() (int, error) {
	switch g.state {
	case gOpaque:
		return len(g.buf), nil
	case gWaitResp:
		return 0, nil
	case gBody:
		n := int(min(int64(len(g.buf)), g.body))
		g.body -= int64(n)
		if g.body == 0 {
			g.state = gHead
		}
		return n, nil
	case gChunked:
		return g.chunked0()
	case gStart:
		return g.start()
	case gLine:
		return g.firstLine(g.buf)
	}
	return g.head()
}

// firstLine passes b, the first bytes of a stream that is not HTTP (a TLS
// hello, another protocol), unless its first line holds "HTTP/": servers
// that take any word for a method (Werkzeug's, Python's http.server with
// a catch-all handler) would read "\x16\x03...  /x HTTP/1.1", a hello
// with text in an extension, as a request, with the headers after it, and
// keep the connection for the rest. Only the first line matters: one
// without a version is refused by every server, which then closes. The
// match is case-sensitive, as servers read the version ("http/1.1" is an
// ALPN name in every browser's hello). A line past lineMax is no request
// to them either: the watch ends there.
func (g *Guard) firstLine(b []byte) (int, error) {
	line := b
	lf := bytes.IndexByte(b, '\n')
	end := lf >= 0
	if end {
		line = b[:lf]
	}
	if rest := lineMax - g.lineLen; len(line) >= rest {
		line, end = line[:rest], true
	}
	seam := append(append([]byte(nil), g.tail...), line[:min(len(line), 4)]...)
	if bytes.Contains(line, []byte("HTTP/")) || bytes.Contains(seam, []byte("HTTP/")) {
		return 0, &GuardError{Reason: "the first line of a TLS hello or another protocol holds \"HTTP/\": lenient servers read it as an HTTP request"}
	}
	if end {
		g.state, g.tail = gOpaque, nil
		return len(b), nil
	}
	g.lineLen += len(line)
	seam = append(g.tail, line...)
	g.state, g.tail = gLine, append([]byte(nil), seam[max(0, len(seam)-4):]...)
	return len(b), nil
}

// lineMax is the longest request line Python's http.server reads
// (readline(65537)); it refuses longer ones.
const lineMax = 64<<10 + 1

// start tells TLS, HTTP and other protocols apart by the first bytes.
func (g *Guard) start() (int, error) {
	b := g.buf
	if b[0] == 0x16 {
		name, ech, more := tlsHello(b)
		switch {
		case more:
			if len(b) > HeadMax {
				return 0, &GuardError{Reason: "the TLS ClientHello is larger than " + strconv.Itoa(HeadMax>>10) + " KiB: too large to check"}
			}
			return 0, errMore
		case ech:
			return 0, &GuardError{Reason: "the TLS ClientHello hides its server name (Encrypted Client Hello)"}
		case name == "":
			return 0, &GuardError{Reason: "a TLS connection without a server name (SNI), a non-ASCII one, or a malformed ClientHello: the name cannot be checked"}
		case !g.Allowed(name):
			return 0, &GuardError{Name: name, Reason: "the TLS server name is not in the allow list"}
		}
		return g.firstLine(b)
	}
	if g.Raw {
		switch mayBeHTTP(b) {
		case likeMore:
			return 0, errMore
		case likeLine:
			g.needLF = true
			return 0, errMore
		case likeNo:
			return g.firstLine(b) // a protocol that names no server, allowed raw
		}
	}
	// Not TLS: it is read as HTTP/1, strictly, and refused if it is not.
	g.state = gHead
	return g.head()
}

type likeness int

const (
	likeNo likeness = iota
	likeHTTP
	likeMore // more bytes may decide
	likeLine // only a line end decides
)

// mayBeHTTP reports whether some common server could take b for an HTTP
// request, with the most lenient reading any of them has: Python's
// http.server strips white space (its str.split set) around the request
// line, splits it on any run of it, takes any first word as the method
// and wants only a last word starting "HTTP/" (or "GET" and a path, for
// HTTP/0.9); Go's net/http takes a method of any length. So: after white
// space, a token followed by white space is HTTP if it is a method (in
// upper case) or its line holds "HTTP/" (in any case); h2c prior
// knowledge ("PRI * HTTP/2.0") is one of those. Bytes whose first word is
// not a token (binary, a JSON message) or ends in another byte are not:
// no server serves a method there. A line without its end waits for it,
// up to HeadMax. White space or a first word past wordMax is HTTP (and
// refused as such): it cannot be told apart within the bound.
func mayBeHTTP(b []byte) likeness {
	i := 0
	for i < len(b) && skippable(b[i]) {
		i++
	}
	switch {
	case i > wordMax:
		return likeHTTP
	case i == len(b):
		return likeMore
	case !isTokenChar(b[i]):
		return likeNo
	}
	j := i
	for j < len(b) && j-i <= wordMax && isTokenChar(b[j]) {
		j++
	}
	switch {
	case j-i > wordMax:
		return likeHTTP
	case j == len(b):
		return likeMore
	case !skippable(b[j]):
		return likeNo // "GET(": no server reads a method there
	case isMethod(b[i:j]):
		return likeHTTP
	}
	end := bytes.IndexByte(b[j:], '\n')
	if end < 0 {
		return likeLine
	}
	if bytes.Contains([]byte(lowerASCII(string(b[i:j+end]))), []byte("http/")) {
		return likeHTTP
	}
	return likeNo // SSH's "SSH-2.0-... comment", SMTP's "EHLO x", Redis's "PING"
}

// isMethod reports the methods servers know. Servers take them in upper
// case only (Python's HTTP/0.9 "GET", nginx, Node), so memcached's
// "get key" stays a protocol of its own; a lower-case method on a line
// holding "HTTP/" is HTTP all the same.
func isMethod(m []byte) bool {
	switch string(m) {
	case "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "CONNECT", "TRACE", "PRI",
		"PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK", "SEARCH", "REPORT", "PURGE":
		return true
	}
	return false
}

// skippable reports whether lenient servers take c for white space before
// a request line: Python's http.server splits the line on what str.split
// does (SP, HT, LF, VT, FF, CR, 0x1c-0x1f, and 0x85 and 0xa0 once the
// bytes are read as Latin-1).
func skippable(c byte) bool {
	return c == ' ' || c >= '\t' && c <= '\r' || c >= 0x1c && c <= 0x1f || c == 0x85 || c == 0xa0
}

// head parses one request head at the start of g.buf.
func (g *Guard) head() (int, error) {
	b := g.buf
	// Empty lines before a request line are skipped by servers; they go
	// with the request, once it is checked.
	skip := 0
	for skip < len(b) && (b[skip] == '\r' || b[skip] == '\n') {
		if skip++; skip > wordMax {
			return 0, &GuardError{Reason: "more than " + strconv.Itoa(wordMax) + " bytes of empty lines before an HTTP request"}
		}
	}
	// The method is checked as it comes: bytes that cannot start a
	// request line are refused at once, not held until a line ends that
	// a binary protocol never sends.
	methodDone := false
	for i, c := range b[skip:] {
		if c == ' ' && i > 0 {
			methodDone = true
			break
		}
		if !isTokenChar(c) {
			if !g.requests && !g.Raw {
				return 0, &GuardError{Reason: "neither TLS nor HTTP/1: a protocol the name check cannot read (allow the name as tcp:NAME to let other protocols through)"}
			}
			return 0, &GuardError{Reason: "a malformed HTTP request line"}
		}
		if i >= wordMax {
			return 0, &GuardError{Reason: "an HTTP method longer than " + strconv.Itoa(wordMax) + " bytes"}
		}
	}
	// The request line is checked as soon as it is whole: an HTTP/0.9
	// request (no version, no Host) waits for no header.
	if l := bytes.IndexByte(b[skip:], '\n'); l >= 0 {
		line := strings.TrimSuffix(string(b[skip:skip+l]), "\r")
		if _, _, _, ok := splitRequestLine(line); !ok {
			return 0, &GuardError{Reason: "a malformed HTTP request line (or HTTP/0.9, which names no host)"}
		}
	}
	from := max(skip, g.scanned-3)
	end := bytes.Index(b[from:], []byte("\r\n\r\n"))
	if end >= 0 {
		end += from - skip
	}
	if end > HeadMax {
		return 0, &GuardError{Reason: "the request head is larger than " + strconv.Itoa(HeadMax>>10) + " KiB: too large to check"}
	}
	if end < 0 {
		if bytes.Contains(b[max(skip, g.scanned-1):], []byte("\n\n")) {
			return 0, &GuardError{Reason: "an HTTP request with bare line feeds: ambiguous, refused"}
		}
		g.needLF, g.scanned = methodDone, len(b)
		return 0, errMore
	}
	head := b[skip : skip+end]
	n := skip + end + 4
	// Any CR or LF left once the CRLFs are gone is a bare one, which
	// servers read differently: refused.
	if bytes.ContainsAny(bytes.ReplaceAll(head, []byte("\r\n"), nil), "\r\n") {
		return 0, &GuardError{Reason: "an HTTP request with bare line feeds: ambiguous, refused"}
	}
	req, err := parseHead(head)
	if err != nil {
		return 0, err
	}
	if !g.Allowed(req.host) {
		return 0, &GuardError{Name: req.host, Reason: "the HTTP Host is not in the allow list"}
	}
	g.requests = true
	switch {
	case req.chunked:
		g.state, g.chunk = gChunked, chunkState{}
	case req.length > 0:
		g.state, g.body = gBody, req.length
	case req.upgrade:
		g.state = gWaitResp
	default:
		g.state = gHead
	}
	g.upgrade = req.upgrade
	if req.upgrade && g.state != gWaitResp {
		return 0, &GuardError{Name: req.host, Reason: "an upgrade request with a body: refused"}
	}
	return n, nil
}

// chunkState follows a chunked body: chunk sizes, data, and the trailer.
type chunkState struct {
	left    int64 // bytes of chunk data left
	crlf    bool  // the CRLF after a chunk's data is next
	trailer bool  // in the trailer after the last chunk
}

// chunked0 passes what it can of a chunked body.
func (g *Guard) chunked0() (int, error) {
	b := g.buf
	c := &g.chunk
	if c.left > 0 {
		n := int(min(int64(len(b)), c.left))
		c.left -= int64(n)
		c.crlf = c.left == 0
		return n, nil
	}
	if c.crlf {
		if len(b) < 2 {
			return 0, errMore
		}
		if b[0] != '\r' || b[1] != '\n' {
			return 0, &GuardError{Reason: "a malformed chunked body (no CRLF after a chunk)"}
		}
		c.crlf = false
		return 2, nil
	}
	i := bytes.Index(b, []byte("\r\n"))
	if i < 0 {
		if len(b) > 4096 || bytes.IndexByte(b, '\n') >= 0 {
			return 0, &GuardError{Reason: "a malformed chunked body (a chunk line without its CRLF)"}
		}
		return 0, errMore
	}
	line := string(b[:i])
	if strings.ContainsAny(line, "\r\n") {
		return 0, &GuardError{Reason: "a malformed chunked body"}
	}
	if c.trailer {
		if line == "" {
			g.state = gHead // the request is over
			c.trailer = false
		} else if name, _, ok := strings.Cut(line, ":"); !ok || !isToken(name) {
			return 0, &GuardError{Reason: "a malformed chunked body trailer"}
		}
		return i + 2, nil
	}
	size, _, ext := strings.Cut(line, ";")
	if ext {
		// No client sends them, and a server that does not read chunked
		// bodies (Python's http.server) takes the next line for a request:
		// "1a;x /x HTTP/1.1" would be one.
		return 0, &GuardError{Reason: "a chunk extension (refused: a server that does not read chunked bodies would read the line as a request)"}
	}
	size = strings.TrimRight(size, " \t")
	if size == "" || len(size) > 15 || strings.TrimLeft(size, "0123456789abcdefABCDEF") != "" {
		return 0, &GuardError{Reason: "a malformed chunk size " + strconv.Quote(size)}
	}
	n, _ := strconv.ParseInt(size, 16, 64)
	if n == 0 {
		c.trailer = true
	} else {
		c.left = n
	}
	return i + 2, nil
}
