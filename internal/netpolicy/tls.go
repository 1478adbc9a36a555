package netpolicy

import (
	"encoding/binary"
	"strings"
)

var be = binary.BigEndian

// TLS extension types the guard reads.
const (
	extServerName = 0
	extECH        = 0xfe0d // encrypted_client_hello
)

// tlsHello reads the server name of a TLS ClientHello, and whether it
// carries an Encrypted Client Hello (whose inner name is hidden). The
// hello may span several handshake records, which servers join: read from
// the first record alone, a hello split on purpose would hide its name.
// more is true while the bytes look like the start of a hello but end too
// soon. A malformed hello, one whose extensions do not add up, or one with
// two server names gives "" (refused by the guard).
func tlsHello(b []byte) (name string, ech, more bool) {
	var h []byte // the records' fragments, joined
	for {
		if len(h) >= 4 {
			if h[0] != 1 { // not a ClientHello
				return "", false, false
			}
			if hl := int(h[1])<<16 | int(h[2])<<8 | int(h[3]); len(h)-4 >= hl {
				h = h[4 : 4+hl]
				break
			}
		}
		if len(b) < 5 {
			return "", false, true
		}
		if b[0] != 0x16 { // the hello ends early
			return "", false, false
		}
		n := int(be.Uint16(b[3:]))
		if len(b) < 5+n {
			return "", false, true
		}
		h = append(h, b[5:5+n]...)
		b = b[5+n:]
	}
	// version, random, session id, cipher suites, compression methods
	if len(h) < 34+1 {
		return "", false, false
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
		return "", false, false
	}
	ext := h[2:]
	if int(be.Uint16(h)) != len(ext) {
		return "", false, false // the extensions do not add up
	}
	names := 0
	for len(ext) > 0 {
		if len(ext) < 4 {
			return "", false, false
		}
		typ, l := be.Uint16(ext), int(be.Uint16(ext[2:]))
		if len(ext) < 4+l {
			return "", false, false
		}
		d := ext[4 : 4+l]
		switch typ {
		case extECH:
			ech = true
		case extServerName:
			// A list of one host_name: list length, type 0, name length.
			names++
			if len(d) < 5 || int(be.Uint16(d)) != len(d)-2 || d[2] != 0 || int(be.Uint16(d[3:])) != len(d)-5 {
				return "", false, false
			}
			name = string(d[5:]) // parseHost below refuses non-ASCII before folding
		}
		ext = ext[4+l:]
	}
	if names > 1 {
		return "", false, false
	}
	if name != "" {
		if h, err := parseHost(name); err != nil || h != strings.TrimSuffix(lowerASCII(name), ".") || strings.Contains(name, ":") {
			return "", false, false
		}
		name = strings.TrimSuffix(lowerASCII(name), ".")
	}
	return name, ech, false
}
