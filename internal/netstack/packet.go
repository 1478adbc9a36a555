package netstack

import (
	"encoding/binary"
	"net/netip"
)

// IP protocol numbers of pings.
const (
	protoICMP   = 1
	protoICMPv6 = 58
)

var be = binary.BigEndian

// packet is one parsed IP packet from the sandbox. l4 aliases the read
// buffer: the transport header and its payload.
type packet struct {
	src, dst netip.Addr
	proto    uint8
	l4       []byte
}

// parseIP parses an IPv4 or IPv6 packet. Fragments and IPv6 extension
// headers are not handled: the sandbox's kernel never fragments what it
// sends over a 65520-byte MTU, and the rest is dropped.
func parseIP(b []byte) (p packet, ok bool) {
	if len(b) < 20 {
		return p, false
	}
	switch b[0] >> 4 {
	case 4:
		ihl := int(b[0]&0x0f) * 4
		total := int(be.Uint16(b[2:]))
		if ihl < 20 || total < ihl || total > len(b) {
			return p, false
		}
		if be.Uint16(b[6:])&0x3fff != 0 { // MF or a fragment offset
			return p, false
		}
		p.src = netip.AddrFrom4([4]byte(b[12:16]))
		p.dst = netip.AddrFrom4([4]byte(b[16:20]))
		p.proto = b[9]
		p.l4 = b[ihl:total]
		return p, true
	case 6:
		if len(b) < 40 {
			return p, false
		}
		plen := int(be.Uint16(b[4:]))
		if 40+plen > len(b) {
			return p, false
		}
		p.src = netip.AddrFrom16([16]byte(b[8:24]))
		p.dst = netip.AddrFrom16([16]byte(b[24:40]))
		p.proto = b[6]
		p.l4 = b[40 : 40+plen]
		return p, true
	}
	return p, false
}

// ipHeaderLen is the size of the IP header writeIP writes.
func ipHeaderLen(v6 bool) int {
	if v6 {
		return 40
	}
	return 20
}

// writeIP fills the IP header at the start of b for a packet of l4len
// transport bytes and returns the header length.
func writeIP(b []byte, src, dst netip.Addr, proto uint8, l4len int) int {
	if src.Is4() {
		b[0], b[1] = 0x45, 0
		be.PutUint16(b[2:], uint16(20+l4len))
		be.PutUint32(b[4:], 0x4000) // id 0, don't fragment
		b[8], b[9] = 64, proto
		b[10], b[11] = 0, 0
		s, d := src.As4(), dst.As4()
		copy(b[12:16], s[:])
		copy(b[16:20], d[:])
		be.PutUint16(b[10:], ^fold(sum(b[:20], 0)))
		return 20
	}
	be.PutUint32(b[0:], 6<<28)
	be.PutUint16(b[4:], uint16(l4len))
	b[6], b[7] = proto, 64
	s, d := src.As16(), dst.As16()
	copy(b[8:24], s[:])
	copy(b[24:40], d[:])
	return 40
}

// pseudo returns the checksum of the pseudo-header TCP and UDP include.
func pseudo(src, dst netip.Addr, proto uint8, l4len int) uint64 {
	var s uint64
	if src.Is4() {
		a, b := src.As4(), dst.As4()
		s = uint64(be.Uint32(a[:])) + uint64(be.Uint32(b[:]))
	} else {
		a, b := src.As16(), dst.As16()
		s = sum(a[:], sum(b[:], 0))
	}
	return s + uint64(proto) + uint64(l4len)
}

// sum adds b to the running ones'-complement sum s, 32 bits at a time into
// 64: no carry is lost for any packet size.
func sum(b []byte, s uint64) uint64 {
	for len(b) >= 16 {
		s += uint64(be.Uint32(b)) + uint64(be.Uint32(b[4:])) + uint64(be.Uint32(b[8:])) + uint64(be.Uint32(b[12:]))
		b = b[16:]
	}
	for len(b) >= 4 {
		s += uint64(be.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		s += uint64(be.Uint16(b)) << 16
		b = b[2:]
		if len(b) == 1 {
			s += uint64(b[0]) << 8
		}
	} else if len(b) == 1 {
		s += uint64(b[0]) << 24
	}
	return s
}

// fold reduces a sum to 16 bits.
func fold(s uint64) uint16 {
	s = (s >> 32) + (s & 0xffffffff)
	s = (s >> 32) + (s & 0xffffffff)
	s = (s >> 16) + (s & 0xffff)
	s = (s >> 16) + (s & 0xffff)
	return uint16(s)
}

// l4Checksum computes the TCP, UDP or ICMPv6 checksum of l4 (whose
// checksum field must be zero).
func l4Checksum(src, dst netip.Addr, proto uint8, l4 []byte) uint16 {
	c := ^fold(sum(l4, pseudo(src, dst, proto, len(l4))))
	if c == 0 && proto == 17 { // UDP
		c = 0xffff
	}
	return c
}
