package netpolicy

import "testing"

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

// A ClientHello split over several TLS records (which servers accept)
// hid its server name: only the first record was read, the name came out
// empty, and an empty name passes the check.
func TestPeekNameFragmentedClientHello(t *testing.T) {
	hello := clientHello(t, "other.example.org")
	for _, cuts := range [][]int{{2}, {60}, {100, 101, 102}, {0, 50}} {
		b := recordsOf(hello, cuts...)
		if name, more := peekName(b); name != "other.example.org" || more {
			t.Errorf("hello cut at %v: peekName = %q, %v; want other.example.org", cuts, name, more)
		}
		// Every proper prefix asks for more.
		for _, n := range []int{3, 5, 8, len(b) / 2, len(b) - 1} {
			if name, more := peekName(b[:n]); name != "" || !more {
				t.Errorf("hello cut at %v, first %d bytes: peekName = %q, %v; want more", cuts, n, name, more)
			}
		}
	}
}
