package nettest

import "encoding/binary"

// LenientHello returns a well-formed TLS ClientHello for the server name
// name that carries text in an extension of its own, before which no
// byte is white space to Python's str.split: a server that takes any word
// for a method (Python's http.server with a catch-all handler, Werkzeug)
// reads the hello's bytes up to text as a method and text as the rest of
// the request, headers included, when text is " /x HTTP/1.1\r\nHost:
// ...\r\n\r\n".
func LenientHello(name, text string) []byte {
	white := func(c byte) bool {
		return c >= '\t' && c <= '\r' || c >= 0x1c && c <= ' ' || c == 0x85 || c == 0xa0
	}
	for pad := 0; ; pad++ {
		ext := append([]byte(text), make([]byte, pad)...)
		sni := []byte{0, 0} // server_name
		sni = binary.BigEndian.AppendUint16(sni, uint16(2+1+2+len(name)))
		sni = binary.BigEndian.AppendUint16(sni, uint16(1+2+len(name)))
		sni = append(sni, 0)
		sni = binary.BigEndian.AppendUint16(sni, uint16(len(name)))
		sni = append(sni, name...)
		exts := []byte{0x12, 0x34} // an extension no one knows: servers skip it
		exts = binary.BigEndian.AppendUint16(exts, uint16(len(ext)))
		exts = append(exts, ext...)
		exts = append(exts, sni...)
		body := []byte{3, 3}
		for range 32 {
			body = append(body, 'A') // random
		}
		body = append(body, 0)                // session id
		body = append(body, 0, 2, 0x13, 0x01) // TLS_AES_128_GCM_SHA256
		body = append(body, 1, 0)             // no compression
		body = binary.BigEndian.AppendUint16(body, uint16(len(exts)))
		body = append(body, exts...)
		hs := []byte{1, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}
		hs = append(hs, body...)
		rec := []byte{0x16, 3, 1}
		rec = binary.BigEndian.AppendUint16(rec, uint16(len(hs)))
		rec = append(rec, hs...)
		// Everything before text: the headers and the lengths.
		before := rec[:len(rec)-len(ext)-len(sni)]
		ok := true
		for _, c := range before {
			ok = ok && !white(c)
		}
		if ok {
			return rec
		}
	}
}
