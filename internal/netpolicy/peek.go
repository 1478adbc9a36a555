package netpolicy

import (
	"bytes"
	"strings"
)

// peekName returns the server name a connection's first bytes carry: the
// SNI of a TLS ClientHello or the Host of an HTTP/1 request. more is true
// while those bytes look like the start of either but end too soon.
func peekName(b []byte) (name string, more bool) {
	if len(b) == 0 {
		return "", true
	}
	if b[0] == 0x16 {
		return tlsServerName(b)
	}
	return httpHost(b)
}

// tlsServerName reads the server_name extension of a ClientHello. The
// hello may span several handshake records, which servers join: read from
// the first record alone, a hello split on purpose would hide its name.
func tlsServerName(b []byte) (string, bool) {
	var h []byte // the records' fragments, joined
	for {
		if len(h) >= 4 {
			if h[0] != 1 { // not a ClientHello
				return "", false
			}
			if hl := int(h[1])<<16 | int(h[2])<<8 | int(h[3]); len(h)-4 >= hl {
				h = h[4 : 4+hl]
				break
			}
		}
		if len(b) < 5 {
			return "", true
		}
		if b[0] != 0x16 { // the hello ends early
			return "", false
		}
		n := int(be.Uint16(b[3:]))
		if len(b) < 5+n {
			return "", true
		}
		h = append(h, b[5:5+n]...)
		b = b[5+n:]
	}
	// version, random, session id, cipher suites, compression methods
	if len(h) < 34+1 {
		return "", false
	}
	h = h[34:]
	skip := func(lenBytes int) bool {
		if len(h) < lenBytes {
			return false
		}
		l := 0
		for i := range lenBytes {
			l = l<<8 | int(h[i])
		}
		if len(h) < lenBytes+l {
			return false
		}
		h = h[lenBytes+l:]
		return true
	}
	if !skip(1) || !skip(2) || !skip(1) || len(h) < 2 {
		return "", false
	}
	ext := h[2:]
	if el := int(be.Uint16(h)); el < len(ext) {
		ext = ext[:el]
	}
	for len(ext) >= 4 {
		typ, l := be.Uint16(ext), int(be.Uint16(ext[2:]))
		if len(ext) < 4+l {
			return "", false
		}
		if typ == 0 { // server_name: list length, then type 0 host_name
			d := ext[4 : 4+l]
			if len(d) >= 5 && d[2] == 0 {
				nl := int(be.Uint16(d[3:]))
				if len(d) >= 5+nl {
					return strings.ToLower(string(d[5 : 5+nl])), false
				}
			}
			return "", false
		}
		ext = ext[4+l:]
	}
	return "", false
}

var methods = []string{"GET ", "POST ", "PUT ", "HEAD ", "DELETE ", "OPTIONS ", "PATCH ", "CONNECT ", "TRACE "}

// httpHost reads the Host header of an HTTP/1 request head.
func httpHost(b []byte) (string, bool) {
	isHTTP := false
	for _, m := range methods {
		k := min(len(b), len(m))
		if string(b[:k]) == m[:k] {
			isHTTP = true
			if len(b) < len(m) {
				return "", true
			}
			break
		}
	}
	if !isHTTP {
		return "", false
	}
	end := bytes.Index(b, []byte("\r\n\r\n"))
	head := b
	if end >= 0 {
		head = b[:end]
	}
	for _, line := range bytes.Split(head, []byte("\r\n"))[1:] {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok || !strings.EqualFold(string(bytes.TrimSpace(k)), "host") {
			continue
		}
		host := strings.ToLower(strings.TrimSpace(string(v)))
		if strings.HasPrefix(host, "[") { // [v6]:port
			if i := strings.IndexByte(host, ']'); i > 0 {
				return host[1:i], false
			}
		} else if i := strings.LastIndexByte(host, ':'); i >= 0 {
			host = host[:i]
		}
		return host, false
	}
	return "", end < 0
}
