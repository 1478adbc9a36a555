package netpolicy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Question is the question of a DNS query.
type Question struct {
	Name        string // lowercased, no trailing dot; "" for the root
	Type, Class uint16
}

// DNS record types and response codes the policy needs (RFC 1035, 3596).
const (
	TypeA     = 1
	TypeAAAA  = 28
	TypeCNAME = 5

	RcodeServFail = 2
	RcodeNXDomain = 3
	RcodeRefused  = 5
)

const (
	dnsHeaderLen = 12
	dnsClassIN   = 1
	dnsFlagQR    = 1 << 15
	dnsFlagRD    = 1 << 8
	dnsFlagRA    = 1 << 7
	dnsMaxName   = 255 // octets on the wire, RFC 1035 section 3.1
)

func dnsU16(b []byte) uint16 { return binary.BigEndian.Uint16(b) }

func dnsTruncated(what string) error { return fmt.Errorf("truncated %s", what) }

// ParseQuery checks msg is a standard query (QR=0, opcode 0) with exactly
// one question and returns the id and that question. Compression pointers
// cannot be valid in the first name of a message, so any pointer there is
// an error.
func ParseQuery(msg []byte) (id uint16, q Question, err error) {
	id, q, _, err = parseQuery(msg)
	return id, q, err
}

// parseQuery also returns the offset just past the question, so that Reply
// can copy the question's original bytes.
func parseQuery(msg []byte) (id uint16, q Question, end int, err error) {
	if err := checkDNSQueryHeader(msg); err != nil {
		return 0, Question{}, 0, fmt.Errorf("dns query: %w", err)
	}
	var b strings.Builder
	off, err := walkDNSName(msg, dnsHeaderLen, func(l []byte) error { return appendDNSLabel(&b, l) })
	if err != nil {
		return 0, Question{}, 0, fmt.Errorf("dns query: question name: %w", err)
	}
	if len(msg)-off < 4 {
		return 0, Question{}, 0, fmt.Errorf("dns query: %w", dnsTruncated("question"))
	}
	q = Question{Name: b.String(), Type: dnsU16(msg[off:]), Class: dnsU16(msg[off+2:])}
	return dnsU16(msg), q, off + 4, nil
}

func checkDNSQueryHeader(msg []byte) error {
	if len(msg) < dnsHeaderLen {
		return dnsTruncated("header")
	}
	flags := dnsU16(msg[2:])
	if flags&dnsFlagQR != 0 {
		return errors.New("not a query (QR bit set)")
	}
	if op := flags >> 11 & 0xF; op != 0 {
		return fmt.Errorf("opcode %d is not a standard query", op)
	}
	if n := dnsU16(msg[4:]); n != 1 {
		return fmt.Errorf("%d questions, want exactly 1", n)
	}
	return nil
}

// appendDNSLabel adds one label to a dotted name, lowercased. A '.' inside a
// label is refused: in dotted form it would shift label boundaries and so
// fool suffix matching against wildcard rules.
func appendDNSLabel(b *strings.Builder, l []byte) error {
	if b.Len() > 0 {
		b.WriteByte('.')
	}
	for _, c := range l {
		if c == '.' {
			return errors.New("label contains a '.'")
		}
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	return nil
}

// walkDNSName reads the possibly compressed name at off, passing each label to
// fn (when not nil), and returns the offset just past the name's own bytes.
// RFC 1035 lets a pointer refer only to a prior occurrence, so each pointer
// must land before the run of labels it ends; that makes the jump targets
// strictly decrease, which rules out loops without counting hops.
func walkDNSName(msg []byte, off int, fn func(label []byte) error) (int, error) {
	end := -1    // offset past the name at the original off; set at the first pointer
	start := off // where the current run of labels began
	wire := 1    // uncompressed length so far, counting the root octet
	for {
		if off >= len(msg) {
			return 0, dnsTruncated("name")
		}
		n := int(msg[off])
		switch n & 0xC0 {
		case 0x00:
			if n == 0 {
				if end < 0 {
					end = off + 1
				}
				return end, nil
			}
			if off+1+n > len(msg) {
				return 0, dnsTruncated("label")
			}
			if wire += 1 + n; wire > dnsMaxName {
				return 0, fmt.Errorf("name longer than %d octets", dnsMaxName)
			}
			if fn != nil {
				if err := fn(msg[off+1 : off+1+n]); err != nil {
					return 0, err
				}
			}
			off += 1 + n
		case 0xC0:
			if off+1 >= len(msg) {
				return 0, dnsTruncated("compression pointer")
			}
			ptr := (n&0x3F)<<8 | int(msg[off+1])
			if ptr < dnsHeaderLen || ptr >= start {
				return 0, fmt.Errorf("compression pointer at offset %d to %d does not point back into the message body", off, ptr)
			}
			if end < 0 {
				end = off + 2
			}
			off, start = ptr, ptr
		default:
			return 0, fmt.Errorf("unsupported label type %#x", n&0xC0)
		}
	}
}

// Reply builds a response to query with the given rcode and no answers:
// same id, QR=1, RD copied, RA=1, the question section copied byte for byte
// (keeping the client's letter case, which some resolvers check), and
// ancount/nscount/arcount 0. It returns nil if query is not parseable or
// rcode does not fit the header's 4 bits.
func Reply(query []byte, rcode int) []byte {
	if rcode < 0 || rcode > 0xF {
		return nil
	}
	_, _, end, err := parseQuery(query)
	if err != nil {
		return nil
	}
	out := make([]byte, end)
	copy(out, query[:end])
	flags := dnsFlagQR | dnsFlagRA | dnsU16(query[2:])&dnsFlagRD | uint16(rcode)
	binary.BigEndian.PutUint16(out[2:], flags)
	binary.BigEndian.PutUint16(out[4:], 1)
	clear(out[6:dnsHeaderLen])
	return out
}

// LoopbackReply answers query with the loopback address of its type (A:
// 127.0.0.1, AAAA: ::1; other types get no answer), as RFC 6761 has
// resolvers answer for localhost names themselves.
func LoopbackReply(query []byte, qtype uint16) []byte {
	out := Reply(query, 0)
	var data []byte
	switch {
	case out == nil:
		return nil
	case qtype == TypeA:
		data = []byte{127, 0, 0, 1}
	case qtype == TypeAAAA:
		data = netip.IPv6Loopback().AsSlice()
	default:
		return out
	}
	binary.BigEndian.PutUint16(out[6:], 1)
	// The owner is the question's name (a pointer to offset 12).
	out = binary.BigEndian.AppendUint16(out, 0xC000|dnsHeaderLen)
	out = binary.BigEndian.AppendUint16(out, qtype)
	out = binary.BigEndian.AppendUint16(out, dnsClassIN)
	out = binary.BigEndian.AppendUint32(out, 3600)
	out = binary.BigEndian.AppendUint16(out, uint16(len(data)))
	return append(out, data...)
}

// dnsRecord is a resource record with its rdata still undecoded.
type dnsRecord struct {
	typ, class uint16
	ttl        uint32
	data       []byte
}

// Answers returns the addresses of all A and AAAA records (class IN) in the
// answer section of resp, whatever their owner name, so the final records
// of a CNAME chain count, and the smallest TTL among them. IPv4-mapped AAAA
// data is returned as IPv4, as Rules.Addr sees it.
func Answers(resp []byte) (addrs []netip.Addr, ttl uint32, err error) {
	if len(resp) < dnsHeaderLen {
		return nil, 0, fmt.Errorf("dns response: %w", dnsTruncated("header"))
	}
	off := dnsHeaderLen
	for i := range int(dnsU16(resp[4:])) {
		if off, err = skipDNSQuestion(resp, off); err != nil {
			return nil, 0, fmt.Errorf("dns response: question %d: %w", i+1, err)
		}
	}
	for i := range int(dnsU16(resp[6:])) {
		var rr dnsRecord
		if rr, off, err = readDNSRecord(resp, off); err != nil {
			return nil, 0, fmt.Errorf("dns response: answer %d: %w", i+1, err)
		}
		a, ok, err := rr.addr()
		if err != nil {
			return nil, 0, fmt.Errorf("dns response: answer %d: %w", i+1, err)
		}
		if !ok {
			continue
		}
		if len(addrs) == 0 || rr.ttl < ttl {
			ttl = rr.ttl
		}
		addrs = append(addrs, a)
	}
	return addrs, ttl, nil
}

func skipDNSQuestion(msg []byte, off int) (int, error) {
	off, err := walkDNSName(msg, off, nil)
	if err != nil {
		return 0, err
	}
	if len(msg)-off < 4 {
		return 0, dnsTruncated("question")
	}
	return off + 4, nil
}

func readDNSRecord(msg []byte, off int) (dnsRecord, int, error) {
	off, err := walkDNSName(msg, off, nil)
	if err != nil {
		return dnsRecord{}, 0, err
	}
	if len(msg)-off < 10 {
		return dnsRecord{}, 0, dnsTruncated("record header")
	}
	rr := dnsRecord{
		typ:   dnsU16(msg[off:]),
		class: dnsU16(msg[off+2:]),
		ttl:   binary.BigEndian.Uint32(msg[off+4:]),
	}
	// RFC 2181 section 8: a TTL with the top bit set means zero.
	if rr.ttl > 1<<31-1 {
		rr.ttl = 0
	}
	n := int(dnsU16(msg[off+8:]))
	off += 10
	if len(msg)-off < n {
		return dnsRecord{}, 0, dnsTruncated("record data")
	}
	rr.data = msg[off : off+n]
	return rr, off + n, nil
}

// addr decodes an IN A or AAAA record; ok is false for any other record.
func (rr dnsRecord) addr() (a netip.Addr, ok bool, err error) {
	if rr.class != dnsClassIN || rr.typ != TypeA && rr.typ != TypeAAAA {
		return netip.Addr{}, false, nil
	}
	a, ok = netip.AddrFromSlice(rr.data)
	if !ok || rr.typ == TypeA && !a.Is4() || rr.typ == TypeAAAA && !a.Is6() {
		return netip.Addr{}, false, fmt.Errorf("type %d record with %d bytes of data", rr.typ, len(rr.data))
	}
	return a.Unmap(), true, nil
}

// Rcode returns the response code of a DNS message (0 when too short).
func Rcode(msg []byte) int {
	if len(msg) < dnsHeaderLen {
		return 0
	}
	return int(msg[3] & 0xF)
}
