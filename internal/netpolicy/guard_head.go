package netpolicy

// Parsing an HTTP/1 request head for the guard: the request line, Host,
// and the headers that decide how the body is framed.

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"
)

// request is what the guard needs of one HTTP request head.
type request struct {
	host    string
	length  int64
	chunked bool
	upgrade bool
}

// parseHead checks a request head (without its final CRLF CRLF).
func parseHead(head []byte) (*request, error) {
	lines := strings.Split(string(head), "\r\n")
	method, target, version, ok := splitRequestLine(lines[0])
	if !ok {
		return nil, &GuardError{Reason: "a malformed HTTP request line"}
	}
	switch {
	case method == "CONNECT":
		return nil, &GuardError{Reason: "HTTP CONNECT (a tunnel to another host) is refused"}
	case method == "PRI" || version == "HTTP/2.0":
		return nil, &GuardError{Reason: "HTTP/2 without TLS cannot be checked"}
	case version != "HTTP/1.1" && version != "HTTP/1.0":
		return nil, &GuardError{Reason: "HTTP version " + strconv.Quote(version) + " cannot be checked"}
	}
	h, err := readHeaders(lines[1:])
	if err != nil {
		return nil, err
	}
	if h.hosts != 1 {
		if h.hosts == 0 {
			return nil, &GuardError{Reason: "an HTTP request without a Host header"}
		}
		return nil, &GuardError{Reason: "an HTTP request with " + strconv.Itoa(h.hosts) + " Host headers: ambiguous, refused"}
	}
	host, err := parseHost(h.host)
	if err != nil {
		return nil, &GuardError{Reason: "HTTP Host " + strconv.Quote(h.host) + ": " + err.Error()}
	}
	if err := checkTarget(target, host, h.host); err != nil {
		return nil, err
	}
	r := &request{host: host, length: -1}
	if err := r.framing(&h); err != nil {
		return nil, err
	}
	if strings.Contains(h.connection, "upgrade") || h.upgrade != "" {
		for _, u := range strings.Split(h.upgrade, ",") {
			u = strings.TrimSpace(u)
			if u != "" && u != "websocket" {
				return nil, &GuardError{Name: host, Reason: "an HTTP upgrade to " + strconv.Quote(u) + " cannot be checked (only WebSocket upgrades are let through)"}
			}
		}
		r.upgrade = strings.Contains(h.upgrade, "websocket")
	}
	return r, nil
}

// headers are the header fields the guard decides on, as a request's
// head gives them: how many Host fields and the last one's value, the
// Content-Length values, and Transfer-Encoding, Connection and Upgrade
// joined.
type headers struct {
	hosts                   int
	host                    string
	lengths                 map[string]bool
	te, connection, upgrade string
}

// readHeaders reads the header lines of a head, refusing folded lines and
// malformed names and values.
func readHeaders(lines []string) (headers, error) {
	h := headers{lengths: map[string]bool{}}
	for _, l := range lines {
		if l == "" {
			continue
		}
		if l[0] == ' ' || l[0] == '\t' {
			return h, &GuardError{Reason: "a folded HTTP header line (obsolete, ambiguous)"}
		}
		name, value, ok := strings.Cut(l, ":")
		if !ok || name == "" || !isToken(name) {
			return h, &GuardError{Reason: "a malformed HTTP header line"}
		}
		if strings.ContainsAny(value, "\x00\r\n") {
			return h, &GuardError{Reason: "a malformed HTTP header value"}
		}
		value = strings.Trim(value, " \t")
		switch lowerASCII(name) {
		case "host":
			h.hosts++
			h.host = value
		case "content-length":
			h.lengths[value] = true
		case "transfer-encoding":
			if h.te != "" {
				h.te += ", "
			}
			h.te += value
		case "connection":
			h.connection += "," + lowerASCII(value)
		case "upgrade":
			h.upgrade += "," + lowerASCII(value)
		}
	}
	return h, nil
}

// checkTarget refuses a request target in absolute form whose authority
// is not host (hostValue as the Host header gave it).
func checkTarget(target, host, hostValue string) error {
	if strings.HasPrefix(target, "/") || target == "*" {
		return nil
	}
	u, ok := strings.CutPrefix(lowerASCII(target), "http://")
	if !ok {
		u, ok = strings.CutPrefix(lowerASCII(target), "https://")
	}
	if !ok {
		return &GuardError{Name: host, Reason: "an HTTP request target that is neither a path nor an http URL"}
	}
	authority, _, _ := strings.Cut(u, "/")
	authority, _, _ = strings.Cut(authority, "?")
	th, err := parseHost(authority)
	if err != nil || th != host {
		return &GuardError{Name: host, Reason: "the HTTP request's URL names " + strconv.Quote(authority) + " but its Host is " + strconv.Quote(hostValue) + ": ambiguous, refused"}
	}
	return nil
}

// framing sets how r's body is framed (chunked, or its length), refusing
// every ambiguous or unknown framing.
func (r *request) framing(h *headers) error {
	host := r.host
	switch {
	case h.te != "" && len(h.lengths) > 0:
		return &GuardError{Name: host, Reason: "an HTTP request with both Content-Length and Transfer-Encoding: ambiguous, refused"}
	case h.te != "":
		codings := strings.Split(lowerASCII(h.te), ",")
		if strings.TrimSpace(codings[len(codings)-1]) != "chunked" {
			return &GuardError{Name: host, Reason: "an HTTP request body whose length cannot be told (Transfer-Encoding " + strconv.Quote(h.te) + ")"}
		}
		for _, c := range codings[:len(codings)-1] {
			if strings.TrimSpace(c) == "chunked" {
				return &GuardError{Name: host, Reason: "Transfer-Encoding chunked twice: ambiguous, refused"}
			}
		}
		r.chunked = true
	case len(h.lengths) > 1:
		return &GuardError{Name: host, Reason: "an HTTP request with different Content-Length headers: ambiguous, refused"}
	case len(h.lengths) == 1:
		for v := range h.lengths {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 || strings.TrimLeft(v, "0123456789") != "" {
				return &GuardError{Name: host, Reason: "an HTTP Content-Length that is not a number: " + strconv.Quote(v)}
			}
			r.length = n
		}
	}
	return nil
}

// splitRequestLine splits "METHOD SP target SP version" (one space each,
// no control byte in the target: a tab is a separator to some servers).
func splitRequestLine(l string) (method, target, version string, ok bool) {
	f := strings.Split(l, " ")
	if len(f) != 3 || f[0] == "" || f[1] == "" || !isToken(f[0]) || strings.IndexFunc(f[1], func(r rune) bool { return r < ' ' || r == 0x7f }) >= 0 {
		return "", "", "", false
	}
	return f[0], f[1], f[2], true
}

// parseHost checks host[:port] (a DNS name or an address literal) and
// returns the host, lower case. Only ASCII is folded: a name with other
// bytes is refused before any folding (the Kelvin sign lowers to 'k').
func parseHost(v string) (string, error) {
	if v == "" {
		return "", errors.New("empty")
	}
	for i := 0; i < len(v); i++ {
		if v[i] >= 0x80 {
			return "", errors.New("not ASCII (give a name in its punycode form, xn--...)")
		}
	}
	if strings.ContainsAny(v, "@ \t,/\\") {
		return "", errors.New("not a host name")
	}
	h := v
	if strings.HasPrefix(v, "[") {
		i := strings.IndexByte(v, ']')
		if i < 0 {
			return "", errors.New("unterminated IPv6 literal")
		}
		h = v[1:i]
		if a, err := netip.ParseAddr(h); err != nil || !a.Is6() {
			return "", errors.New("a malformed IPv6 literal")
		}
		if rest := v[i+1:]; rest != "" && !validPort(strings.TrimPrefix(rest, ":"), strings.HasPrefix(rest, ":")) {
			return "", errors.New("a malformed port")
		}
		return lowerASCII(h), nil
	}
	if i := strings.LastIndexByte(v, ':'); i >= 0 {
		if !validPort(v[i+1:], true) {
			return "", errors.New("a malformed port")
		}
		h = v[:i]
	}
	h = strings.TrimSuffix(lowerASCII(h), ".")
	if h == "" {
		return "", errors.New("empty")
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return "", errors.New("not a host name")
		}
	}
	return h, nil
}

func validPort(p string, colon bool) bool {
	if !colon || p == "" || len(p) > 5 {
		return false
	}
	n, err := strconv.Atoi(p)
	return err == nil && n > 0 && n < 65536 && strings.TrimLeft(p, "0123456789") == ""
}

func isTokenChar(c byte) bool {
	return c > ' ' && c < 0x7f && !strings.ContainsRune("\"(),/:;<=>?@[\\]{}", rune(c))
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return s != ""
}
