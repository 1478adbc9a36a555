package netpolicy

import (
	"crypto/tls"
	"net"
	"net/netip"
	"testing"
	"time"
)

// clientHello returns the first bytes a real TLS client sends for name.
func clientHello(t *testing.T, name string) []byte {
	t.Helper()
	c, s := net.Pipe()
	go func() {
		tc := tls.Client(c, &tls.Config{ServerName: name, InsecureSkipVerify: true})
		tc.SetDeadline(time.Now().Add(2 * time.Second))
		tc.Handshake()
		c.Close()
	}()
	b := make([]byte, 16<<10)
	s.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, err := s.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	return b[:n]
}

func TestPeekName(t *testing.T) {
	hello := clientHello(t, "Registry.Example.org")
	for _, c := range []struct {
		in   []byte
		name string
		more bool
	}{
		{hello, "registry.example.org", false},
		{hello[:3], "", true},
		{hello[:len(hello)-1], "", true},
		{[]byte("GET / HTTP/1.1\r\nHost: api.example.org:8080\r\n\r\n"), "api.example.org", false},
		{[]byte("GET / HTTP/1.1\r\nhOsT:  [2001:db8::1]:80\r\n\r\n"), "2001:db8::1", false},
		{[]byte("POST /x HTTP/1.1\r\nUser-Agent: a"), "", true},
		{[]byte("GE"), "", true},
		{[]byte("GET / HTTP/1.0\r\n\r\n"), "", false},
		{[]byte("SSH-2.0-OpenSSH\r\n"), "", false},
		{nil, "", true},
	} {
		name, more := peekName(c.in)
		if name != c.name || more != c.more {
			t.Errorf("peekName(%.30q) = %q, %v; want %q, %v", c.in, name, more, c.name, c.more)
		}
	}
}

func TestChecksumMatchesRFC1071(t *testing.T) {
	// The 20-byte header from RFC 1071's worked example family: a header
	// whose checksum field is filled must sum to 0xffff.
	src, dst := netip.MustParseAddr("10.0.2.2"), netip.MustParseAddr("10.0.2.100")
	for _, n := range []int{0, 1, 2, 3, 5, 17, 1400, 65000} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i*7 + 3)
		}
		key := flowKey{netip.AddrPortFrom(dst, 40000), netip.AddrPortFrom(src, 443)}
		pkt := tcpPacket(nil, key, 1, 2, flagACK, 100, nil, data)
		if got := fold(sum(pkt[:20], 0)); got != 0xffff {
			t.Errorf("%d bytes: IP header sums to %#x", n, got)
		}
		l4 := pkt[20:]
		if got := fold(sum(l4, pseudo(src, dst, protoTCP, len(l4)))); got != 0xffff {
			t.Errorf("%d bytes: TCP segment sums to %#x", n, got)
		}
		p, ok := parseIP(pkt)
		if !ok || p.src != src || p.dst != dst || p.proto != protoTCP {
			t.Fatalf("parseIP: %+v %v", p, ok)
		}
		seg, ok := parseTCP(p.l4)
		if !ok || seg.seq != 1 || seg.ack != 2 || len(seg.payload) != n {
			t.Errorf("parseTCP: %+v %v", seg, ok)
		}
	}
}
