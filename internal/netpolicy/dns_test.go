package netpolicy

import (
	"bytes"
	"encoding/hex"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// msg joins message parts; a string part is hex (spaces ignored), a []byte
// part is used as is.
func msg(t testing.TB, parts ...any) []byte {
	t.Helper()
	var b []byte
	for _, p := range parts {
		switch p := p.(type) {
		case string:
			h, err := hex.DecodeString(strings.ReplaceAll(p, " ", ""))
			if err != nil {
				t.Fatalf("bad hex %q: %v", p, err)
			}
			b = append(b, h...)
		case []byte:
			b = append(b, p...)
		default:
			t.Fatalf("bad part %T", p)
		}
	}
	return b
}

// labels encodes a name uncompressed, without the terminating root octet,
// so a test can end it with 00 or a pointer.
func labels(ls ...string) []byte {
	var b []byte
	for _, l := range ls {
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	return b
}

// The query dig sends for "example.org A" (id 0x1234, RD), written out.
const digQuery = "1234 0100 0001 0000 0000 0000" +
	" 07 6578616d706c65 03 6f7267 00" + // example.org
	" 0001 0001" // A, IN

func TestDNSQueryLayout(t *testing.T) {
	// Cross-check the label helper against the literal layout above.
	hand := msg(t, "1234 0100 0001 0000 0000 0000", labels("example", "org"), "00 0001 0001")
	if lit := msg(t, digQuery); !bytes.Equal(hand, lit) || len(lit) != 12+13+4 {
		t.Fatalf("layout mismatch:\n%x\n%x", hand, lit)
	}
}

func TestDNSParseQuery(t *testing.T) {
	long255 := labels(strings.Repeat("a", 63), strings.Repeat("b", 63), strings.Repeat("c", 63), strings.Repeat("d", 61))
	hdr := "abcd 0100 0001 0000 0000 0000"
	for _, tt := range []struct {
		desc string
		msg  []byte
		id   uint16
		q    Question
	}{
		{"dig query", msg(t, digQuery), 0x1234, Question{"example.org", TypeA, 1}},
		{"mixed case (0x20)", msg(t, hdr, labels("ExAmPlE", "ORG"), "00 001c 0001"), 0xabcd, Question{"example.org", TypeAAAA, 1}},
		{"root", msg(t, hdr, "00 0002 0001"), 0xabcd, Question{"", 2, 1}},
		{"with EDNS OPT", msg(t, "abcd 0120 0001 0000 0000 0001", labels("a", "b"), "00 0001 0001",
			"00 0029 1000 00000000 0000"), 0xabcd, Question{"a.b", TypeA, 1}},
		{"name of 255 octets", msg(t, hdr, long255, "00 0001 0001"), 0xabcd,
			Question{strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61), TypeA, 1}},
		{"trailing bytes ignored", msg(t, digQuery, "ffff"), 0x1234, Question{"example.org", TypeA, 1}},
	} {
		id, q, err := ParseQuery(tt.msg)
		if err != nil || id != tt.id || q != tt.q {
			t.Errorf("%s: ParseQuery = %#x, %+v, %v; want %#x, %+v", tt.desc, id, q, err, tt.id, tt.q)
		}
	}
}

func TestDNSParseQueryErrors(t *testing.T) {
	hdr := "abcd 0100 0001 0000 0000 0000"
	for _, tt := range []struct {
		desc string
		msg  []byte
		want string
	}{
		{"empty", nil, "truncated header"},
		{"short header", msg(t, "abcd 0100 0001 0000 0000 00"), "truncated header"},
		{"response", msg(t, "abcd 8180 0001 0000 0000 0000 00 0001 0001"), "not a query"},
		{"notify opcode", msg(t, "abcd 2000 0001 0000 0000 0000 00 0001 0001"), "opcode 4"},
		{"no question", msg(t, "abcd 0100 0000 0000 0000 0000"), "0 questions"},
		{"two questions", msg(t, "abcd 0100 0002 0000 0000 0000 00 0001 0001 00 0001 0001"), "2 questions"},
		{"no name", msg(t, hdr), "truncated name"},
		{"cut label", msg(t, hdr, "07 657861"), "truncated label"},
		{"no root", msg(t, hdr, labels("example")), "truncated name"},
		{"no type", msg(t, hdr, labels("example"), "00 0001"), "truncated question"},
		{"pointer to itself", msg(t, hdr, "c00c 0001 0001"), "does not point back"},
		{"label loop", msg(t, hdr, "01 61 c00c 0001 0001"), "does not point back"},
		{"pointer into header", msg(t, hdr, "c000 0001 0001"), "does not point back"},
		{"pointer out of range", msg(t, hdr, "ffff 0001 0001"), "does not point back"},
		{"forward pointer", msg(t, hdr, "c00e 00 0001 0001"), "does not point back"},
		{"cut pointer", msg(t, hdr, "c0"), "truncated compression pointer"},
		{"extended label", msg(t, hdr, "41 00 0001 0001"), "unsupported label type 0x40"},
		{"dot in label", msg(t, hdr, labels("evil.example", "org"), "00 0001 0001"), "label contains a '.'"},
		{"name too long", msg(t, hdr, labels(strings.Repeat("a", 63), strings.Repeat("b", 63),
			strings.Repeat("c", 63), strings.Repeat("d", 62)), "00 0001 0001"), "longer than 255"},
	} {
		_, _, err := ParseQuery(tt.msg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: ParseQuery error = %v, want it to contain %q", tt.desc, err, tt.want)
		}
	}
}

func TestDNSReply(t *testing.T) {
	// RD and AD set, an EDNS OPT record, and a mixed-case name.
	q := msg(t, "beef 0120 0001 0000 0000 0001", labels("WWW", "Example", "org"), "00 001c 0001",
		"00 0029 1000 00000000 0000")
	want := msg(t, "beef 8185 0001 0000 0000 0000", labels("WWW", "Example", "org"), "00 001c 0001")
	got := Reply(q, RcodeRefused)
	if !bytes.Equal(got, want) {
		t.Fatalf("Reply =\n%x\nwant\n%x", got, want)
	}
	if Rcode(got) != RcodeRefused {
		t.Errorf("Rcode(reply) = %d", Rcode(got))
	}
	if addrs, ttl, err := Answers(got); err != nil || addrs != nil || ttl != 0 {
		t.Errorf("Answers(reply) = %v, %d, %v", addrs, ttl, err)
	}

	// Without RD the reply has no RD; rcode lands in the low 4 bits.
	got = Reply(msg(t, "0001 0000 0001 0000 0000 0000 00 0001 0001"), RcodeNXDomain)
	if want := msg(t, "0001 8083 0001 0000 0000 0000 00 0001 0001"); !bytes.Equal(got, want) {
		t.Errorf("Reply without RD = %x, want %x", got, want)
	}
	got = Reply(msg(t, digQuery), RcodeServFail)
	if want := msg(t, "1234 8182"+digQuery[9:]); !bytes.Equal(got, want) {
		t.Errorf("Reply(dig query) = %x, want %x", got, want)
	}

	for _, tt := range []struct {
		desc  string
		q     []byte
		rcode int
	}{
		{"garbage", []byte("hello"), RcodeRefused},
		{"a reply", want, RcodeRefused},
		{"rcode too big", q, 16},
		{"negative rcode", q, -1},
	} {
		if got := Reply(tt.q, tt.rcode); got != nil {
			t.Errorf("Reply(%s) = %x, want nil", tt.desc, got)
		}
	}
}

// cnameResponse is www.example.org CNAME example.org with two A records,
// every name after the question compressed.
func cnameResponse(t testing.TB) []byte {
	return msg(t, "1234 8180 0001 0003 0000 0000",
		labels("www", "example", "org"), "00 0001 0001", // question at 12; "example" at 16 (0x10)
		"c00c 0005 0001 00000e10 0002 c010",     // www.example.org CNAME example.org, TTL 3600
		"c010 0001 0001 0000012c 0004 5db8d70e", // example.org A 93.184.215.14, TTL 300
		"c010 0001 0001 0000003c 0004 5db8d70f", // example.org A 93.184.215.15, TTL 60
	)
}

func TestDNSAnswers(t *testing.T) {
	hdr := func(an string) string { return "1234 8180 0001 " + an + " 0000 0000" }
	q := msg(t, labels("www", "example", "org"), "00 0001 0001")
	for _, tt := range []struct {
		desc  string
		msg   []byte
		addrs []string
		ttl   uint32
	}{
		{"CNAME chain", cnameResponse(t), []string{"93.184.215.14", "93.184.215.15"}, 60},
		{"AAAA, chained pointers", msg(t, hdr("0002"), q,
			"03 617069 c00c 001c 0001 00000078 0010 20010db8000000000000000000000001",  // api.www.example.org at 0x21
			"03 777777 c021 001c 0001 000000f0 0010 20010db8000000000000000000000002"), // www.api.www... via two pointers
			[]string{"2001:db8::1", "2001:db8::2"}, 120},
		{"mapped AAAA is IPv4", msg(t, hdr("0001"), q,
			"c00c 001c 0001 00000005 0010 00000000000000000000ffff01020304"), []string{"1.2.3.4"}, 5},
		{"uncompressed owner", msg(t, hdr("0001"), q,
			labels("www", "example", "org"), "00 0001 0001 00000001 0004 c0000201"), []string{"192.0.2.1"}, 1},
		{"top-bit TTL is zero", msg(t, hdr("0001"), q, "c00c 0001 0001 80000000 0004 c0000201"), []string{"192.0.2.1"}, 0},
		{"non-IN class skipped", msg(t, hdr("0002"), q,
			"c00c 0001 0003 00000001 0004 c0000201",
			"c00c 0001 0001 00000009 0004 c0000202"), []string{"192.0.2.2"}, 9},
		{"other types skipped", msg(t, hdr("0002"), q,
			"c00c 0010 0001 00000001 0004 03616263", // TXT "abc"
			"c00c 0005 0001 00000001 0002 c00c"), nil, 0},
		{"NXDOMAIN", msg(t, "1234 8183 0001 0000 0000 0000", q), nil, 0},
		{"only the answer section counts", msg(t, "1234 8180 0001 0001 0001 0001", q,
			"c00c 0001 0001 00000007 0004 c0000201",
			"c00c 0001 0001 00000001 0004 0a000001",
			"c00c 0001 0001 00000001 0004 0a000002"), []string{"192.0.2.1"}, 7},
		{"later sections not read", msg(t, "1234 8180 0001 0001 0000 0005", q,
			"c00c 0001 0001 00000007 0004 c0000201", "ffff"), []string{"192.0.2.1"}, 7},
	} {
		addrs, ttl, err := Answers(tt.msg)
		var want []netip.Addr
		for _, a := range tt.addrs {
			want = append(want, netip.MustParseAddr(a))
		}
		if err != nil || !slices.Equal(addrs, want) || ttl != tt.ttl {
			t.Errorf("%s: Answers = %v, %d, %v; want %v, %d", tt.desc, addrs, ttl, err, want, tt.ttl)
		}
	}
}

func TestDNSAnswersErrors(t *testing.T) {
	hdr := func(an string) string { return "1234 8180 0001 " + an + " 0000 0000" }
	q := msg(t, labels("www", "example", "org"), "00 0001 0001")
	for _, tt := range []struct {
		desc string
		msg  []byte
		want string
	}{
		{"short", msg(t, "1234 81"), "truncated header"},
		{"missing answer", msg(t, hdr("0002"), q, "c00c 0001 0001 00000007 0004 c0000201"), "answer 2: truncated name"},
		{"cut rdata", msg(t, hdr("0001"), q, "c00c 0001 0001 00000007 0004 c00002"), "truncated record data"},
		{"cut record header", msg(t, hdr("0001"), q, "c00c 0001 0001 0000"), "truncated record header"},
		{"A of 5 bytes", msg(t, hdr("0001"), q, "c00c 0001 0001 00000007 0005 c000020101"), "type 1 record with 5 bytes"},
		{"AAAA of 4 bytes", msg(t, hdr("0001"), q, "c00c 001c 0001 00000007 0004 c0000201"), "type 28 record with 4 bytes"},
		{"owner points to itself", msg(t, hdr("0001"), q, "c021 0001 0001 00000007 0004 c0000201"), "does not point back"},
		{"owner label loop", msg(t, hdr("0001"), q, "01 61 c021 0001 0001 00000007 0004 c0000201"), "does not point back"},
		// Owner at 0x21 jumps forward to 0x25, which jumps back to 0x21: a
		// two-pointer loop, refused at its forward step.
		{"mutual pointers", msg(t, hdr("0001"), q, "c025 0001 c021"), "does not point back"},
		{"pointer out of range", msg(t, hdr("0001"), q, "ffff 0001 0001 00000007 0004 c0000201"), "does not point back"},
		{"question loop", msg(t, "1234 8180 0001 0000 0000 0000 01 61 c00c 0001 0001"), "question 1:"},
		{"question cut", msg(t, "1234 8180 0002 0000 0000 0000", q), "question 2: truncated name"},
	} {
		addrs, ttl, err := Answers(tt.msg)
		if err == nil || !strings.Contains(err.Error(), tt.want) || addrs != nil || ttl != 0 {
			t.Errorf("%s: Answers = %v, %d, %v; want error containing %q", tt.desc, addrs, ttl, err, tt.want)
		}
	}
}

func TestDNSAnswersTruncated(t *testing.T) {
	full := cnameResponse(t)
	for n := range len(full) {
		if _, _, err := Answers(full[:n]); err == nil {
			t.Errorf("Answers(first %d of %d bytes) succeeded", n, len(full))
		}
	}
}

func TestDNSRcode(t *testing.T) {
	for _, tt := range []struct {
		msg  []byte
		want int
	}{
		{nil, 0},
		{msg(t, "1234 8183 0001 0000 0000"), 0}, // shorter than a header
		{msg(t, "1234 8183 0001 0000 0000 0000"), RcodeNXDomain},
		{msg(t, "1234 81f2 0000 0000 0000 0000"), RcodeServFail}, // Z/AD/CD bits ignored
		{msg(t, "1234 818f 0000 0000 0000 0000"), 15},
		{cnameResponse(t), 0},
	} {
		if got := Rcode(tt.msg); got != tt.want {
			t.Errorf("Rcode(%x) = %d, want %d", tt.msg, got, tt.want)
		}
	}
}

func FuzzDNS(f *testing.F) {
	f.Add(msg(f, digQuery))
	f.Add(cnameResponse(f))
	f.Add(msg(f, "abcd 0100 0001 0000 0000 0000 01 61 c00c 0001 0001"))
	f.Add(msg(f, "1234 8180 0001 0001 0000 0000 00 0001 0001 c00c 001c 0001 00000005 0010 00000000000000000000ffff01020304"))
	f.Fuzz(func(t *testing.T, m []byte) {
		_ = Rcode(m)
		addrs, ttl, err := Answers(m)
		if err != nil && (addrs != nil || ttl != 0) {
			t.Fatalf("Answers returned data with error %v", err)
		}
		for _, a := range addrs {
			if !a.IsValid() || a.Is4In6() || a.Zone() != "" {
				t.Fatalf("Answers returned %v", a)
			}
		}
		id, q, err := ParseQuery(m)
		reply := Reply(m, RcodeRefused)
		if (err == nil) != (reply != nil) {
			t.Fatalf("ParseQuery error %v but Reply %x", err, reply)
		}
		if err != nil {
			return
		}
		if strings.HasPrefix(q.Name, ".") || strings.HasSuffix(q.Name, ".") || strings.Contains(q.Name, "..") ||
			strings.ContainsAny(q.Name, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") || len(q.Name) > 253 {
			t.Fatalf("ParseQuery name %q not canonical", q.Name)
		}
		if Rcode(reply) != RcodeRefused || reply[2]&0x80 == 0 {
			t.Fatalf("Reply %x: not a REFUSED response", reply)
		}
		if a, _, err := Answers(reply); err != nil || a != nil {
			t.Fatalf("Answers(Reply) = %v, %v", a, err)
		}
		// Clearing QR turns the reply back into the same query.
		back := bytes.Clone(reply)
		back[2] &^= 0x80
		if id2, q2, err := ParseQuery(back); err != nil || id2 != id || q2 != q {
			t.Fatalf("reply as query = %#x, %+v, %v; want %#x, %+v", id2, q2, err, id, q)
		}
	})
}

// localhost names resolve to the sandbox's loopback in pinfold's own
// server: no violation, nothing asked upstream, whatever the lists say.
func TestResolveLocalhost(t *testing.T) {
	p := NewPolicy(Config{Mode: Allow})
	var seen []Violation
	p.OnViolation = func(v Violation) { seen = append(seen, v) }
	upstream := func([]byte) ([]byte, error) {
		t.Fatal("a localhost name was asked upstream")
		return nil, nil
	}
	for _, c := range []struct {
		name  []byte
		qtype string
		want  []netip.Addr
	}{
		{labels("localhost"), "0001", []netip.Addr{netip.MustParseAddr("127.0.0.1")}},
		{labels("LocalHost"), "001c", []netip.Addr{netip.IPv6Loopback()}},
		{labels("db", "localhost"), "0001", []netip.Addr{netip.MustParseAddr("127.0.0.1")}},
		{labels("localhost"), "0010", nil}, // TXT: no answer
	} {
		q := msg(t, "abcd 0100 0001 0000 0000 0000", c.name, "00", c.qtype, "0001")
		resp := p.Resolve(q, upstream)
		addrs, _, err := Answers(resp)
		if err != nil || !slices.Equal(addrs, c.want) || Rcode(resp) != 0 {
			t.Errorf("%q type %s: %v %v rcode %d", c.name, c.qtype, addrs, err, Rcode(resp))
		}
	}
	// Not a localhost name: refused by the lists as before.
	resp := p.Resolve(msg(t, "abcd 0100 0001 0000 0000 0000", labels("localhost", "example"), "00 0001 0001"), upstream)
	if Rcode(resp) != RcodeNXDomain || len(seen) != 1 {
		t.Errorf("localhost.example: rcode %d, violations %v", Rcode(resp), seen)
	}
}
