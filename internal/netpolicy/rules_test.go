package netpolicy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseRule(t *testing.T) {
	for _, tt := range []struct {
		in     string
		text   string // want Text; defaults to in
		name   string // want canonical name ("" for address rules)
		wild   bool
		prefix string // want prefix for address rules
	}{
		{in: "example.org", name: "example.org"},
		{in: "Example.ORG.", name: "example.org"},
		{in: "  example.org\t", text: "example.org", name: "example.org"},
		{in: "my_host-1.Example.org", name: "my_host-1.example.org"},
		{in: "localhost", name: "localhost"},
		{in: "1password.com", name: "1password.com"},
		{in: "xn--bcher-kva.example", name: "xn--bcher-kva.example"},
		{in: "*.example.org", name: "example.org", wild: true},
		{in: "*.Example.org.", name: "example.org", wild: true},
		{in: "*.org", name: "org", wild: true},
		{in: strings.Repeat("a", 63) + ".org", name: strings.Repeat("a", 63) + ".org"},
		{in: longName(253), name: longName(253)},
		{in: "1.2.3.4", prefix: "1.2.3.4/32"},
		{in: "2001:DB8::1", prefix: "2001:db8::1/128"},
		{in: "::ffff:1.2.3.4", prefix: "1.2.3.4/32"},
		{in: "10.0.0.0/8", prefix: "10.0.0.0/8"},
		{in: "0.0.0.0/0", prefix: "0.0.0.0/0"},
		{in: "2001:db8::/32", prefix: "2001:db8::/32"},
		{in: "::ffff:10.0.0.0/104", prefix: "10.0.0.0/8"},
		{in: "::ffff:0:0/96", prefix: "0.0.0.0/0"},
		{in: "::/80", prefix: "::/80"},
	} {
		r, err := ParseRule(tt.in)
		if err != nil {
			t.Errorf("ParseRule(%q): %v", tt.in, err)
			continue
		}
		text := tt.text
		if text == "" {
			text = tt.in
		}
		var p netip.Prefix
		if tt.prefix != "" {
			p = netip.MustParsePrefix(tt.prefix)
		}
		want := Rule{Text: text, name: tt.name, wild: tt.wild, prefix: p}
		if r != want {
			t.Errorf("ParseRule(%q) = %+v, want %+v", tt.in, r, want)
		}
		if r.IsName() != (tt.name != "") {
			t.Errorf("ParseRule(%q).IsName() = %v", tt.in, r.IsName())
		}
	}
}

// longName builds a valid name of exactly n characters.
func longName(n int) string {
	var b strings.Builder
	for b.Len() < n {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(strings.Repeat("x", min(63, n-b.Len())))
	}
	s := b.String()
	if strings.HasSuffix(s, ".") { // cannot end a label run on a dot
		s = s[:len(s)-2] + "yy"
	}
	return s
}

func TestParseRuleErrors(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", "empty rule"},
		{"   ", "empty rule"},
		{"https://Example.org/path", `a URL is not a rule; give the host name only: "example.org"`},
		{"http://user@host.org:8080/x?y", `give the host name only: "host.org"`},
		{"http://[2001:db8::1]:80/", `give the host name only: "2001:db8::1"`},
		{"https:///", "give the host name only, e.g. example.org"},
		{"example.org/path", `paths are not part of a rule; give the host name only: "example.org"`},
		{"Example.org:443/x", `paths are not part of a rule; give the host name only: "example.org"`},
		{"1.2.3.4:80/x", `paths are not part of a rule; give the host name only: "1.2.3.4"`},
		{"example.org:443", `ports are not part of a rule; give "example.org"`},
		{"1.2.3.4:53", `ports are not part of a rule; give "1.2.3.4"`},
		{"*.example.org:443", `ports are not part of a rule; give "*.example.org"`},
		{"[2001:db8::1]:53", `ports are not part of a rule; give "2001:db8::1"`},
		{"[2001:db8::1]", `without brackets: "2001:db8::1"`},
		{"[2001:db8::1]x", "unexpected text after ']'"},
		{"[nope]", "not a valid IP address in brackets"},
		{"*", `a lone "*" is not allowed`},
		{"*.", `a lone "*" is not allowed`},
		{"*foo.org", `wildcards are written "*.example.org"`},
		{"a.*.org", `wildcards are written "*.example.org"`},
		{"*.*.org", `wildcards are written "*.example.org"`},
		{"foo.*", `wildcards are written "*.example.org"`},
		{"1.2.3.256", "not a valid IPv4 address"},
		{"1.2.3", "not a valid IPv4 address"},
		{"123", "not a valid IPv4 address"},
		{"example.123", "cannot end in an all-digit label"},
		{"10.0.0.0/33", "not a valid CIDR"},
		{"10.0.0.0/", "not a valid CIDR"},
		{"2001:db8::/129", "not a valid CIDR"},
		{"10.0.0.1/8", `did you mean "10.0.0.0/8"?`},
		{"2001:db8::1/32", `did you mean "2001:db8::/32"?`},
		{"2001:db8", "not a valid IPv6 address"},
		{"2001:db8:::1", "not a valid IPv6 address"},
		{"fe80::1%eth0", "zones are not supported; give the address without %eth0"},
		{"exa mple.org", `' ' is not allowed in a host name`},
		{"a..org", "empty label"},
		{".", "empty host name"},
		{"*..", "empty host name"},
		{"bücher.de", "punycode"},
		{strings.Repeat("a", 64) + ".org", "64 characters long; the limit is 63"},
		{longName(254), "254 characters long; the limit is 253"},
	} {
		_, err := ParseRule(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseRule(%q) error = %v, want it to contain %q", tt.in, err, tt.want)
		}
	}
}

func TestParseRules(t *testing.T) {
	rs, err := ParseRules([]string{"example.org", "10.0.0.0/8"}, []string{"*.evil.org"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs.Allow) != 2 || len(rs.Deny) != 1 || rs.Deny[0].Text != "*.evil.org" {
		t.Fatalf("ParseRules = %+v", rs)
	}
	for _, tt := range []struct {
		allow, deny []string
		want        string
	}{
		{[]string{"ok.org", "bad:1", "*"}, nil, `allow: rule "bad:1": ports`},
		{[]string{"ok.org"}, []string{"ok.org", "a.*.b"}, `deny: rule "a.*.b": wildcards`},
		{[]string{"http://x"}, []string{"*"}, `allow: rule "http://x"`},
	} {
		_, err := ParseRules(tt.allow, tt.deny)
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("ParseRules(%q, %q) error = %v, want prefix %q", tt.allow, tt.deny, err, tt.want)
		}
	}
}

func mustRules(t testing.TB, allow, deny []string) *Rules {
	t.Helper()
	rs, err := ParseRules(allow, deny)
	if err != nil {
		t.Fatal(err)
	}
	return &rs
}

func TestRulesName(t *testing.T) {
	rs := mustRules(t,
		[]string{"example.org", "*.github.com", "*.corp.internal", "10.0.0.0/8", "kelvin.org"},
		[]string{"secret.corp.internal", "*.evil.github.com", "192.0.2.1"})
	for _, tt := range []struct {
		name string
		ok   bool
		rule string
	}{
		{"example.org", true, "example.org"},
		{"EXAMPLE.org.", true, "example.org"},
		{"www.example.org", false, ""},
		{"example.org.evil", false, ""},
		{"github.com", false, ""},
		{"api.github.com", true, "*.github.com"},
		{"a.b.c.github.com", true, "*.github.com"},
		{"API.GitHub.com.", true, "*.github.com"},
		{"notgithub.com", false, ""},
		{".github.com", false, ""},
		{"evil.github.com", true, "*.github.com"},
		{"x.evil.github.com", false, "*.evil.github.com"},
		{"secret.corp.internal", false, "secret.corp.internal"},
		{"Secret.Corp.Internal.", false, "secret.corp.internal"},
		{"other.corp.internal", true, "*.corp.internal"},
		{"10.0.0.1", false, ""},        // address rules never match names
		{"192.0.2.1", false, ""},       // nor deny them
		{"\u212Aelvin.org", false, ""}, // Kelvin sign must not fold to 'k'
		{"", false, ""},
		{".", false, ""},
	} {
		ok, rule := rs.Name(tt.name)
		if ok != tt.ok || rule != tt.rule {
			t.Errorf("Name(%q) = %v, %q; want %v, %q", tt.name, ok, rule, tt.ok, tt.rule)
		}
	}
	var zero Rules
	if ok, rule := zero.Name("example.org"); ok || rule != "" {
		t.Errorf("zero Rules: Name = %v, %q", ok, rule)
	}
}

func TestRulesAddr(t *testing.T) {
	rs := mustRules(t,
		[]string{"10.0.0.0/8", "2001:db8::/32", "192.0.2.7", "example.org", "fe80::/10"},
		[]string{"10.1.0.0/16", "2001:db8:bad::/48", "::ffff:10.2.0.0/112", "fe80::bad/128", "*.example.org"})
	for _, tt := range []struct {
		addr   string // "" for the zero Addr
		ok     bool
		rule   string
		denied bool
	}{
		{"10.0.0.1", true, "10.0.0.0/8", false},
		{"::ffff:10.0.0.1", true, "10.0.0.0/8", false},
		{"10.1.2.3", false, "10.1.0.0/16", true},
		{"::ffff:10.1.2.3", false, "10.1.0.0/16", true},
		{"10.2.3.4", false, "::ffff:10.2.0.0/112", true},
		{"192.0.2.7", true, "192.0.2.7", false},
		{"192.0.2.8", false, "", false},
		{"2001:db8::1", true, "2001:db8::/32", false},
		{"2001:db8:bad::1", false, "2001:db8:bad::/48", true},
		{"::a00:1", false, "", false}, // IPv4-compatible, not mapped: stays IPv6
		{"fe80::1%eth0", true, "fe80::/10", false},
		{"fe80::bad%eth0", false, "fe80::bad/128", true}, // a zone must not dodge a deny
		{"8.8.8.8", false, "", false},
		{"", false, "", false},
	} {
		var a netip.Addr
		if tt.addr != "" {
			a = netip.MustParseAddr(tt.addr)
		}
		ok, rule := rs.Addr(a)
		if ok != tt.ok || rule != tt.rule {
			t.Errorf("Addr(%s) = %v, %q; want %v, %q", tt.addr, ok, rule, tt.ok, tt.rule)
		}
		denied, drule := rs.DeniedAddr(a)
		wantRule := ""
		if tt.denied {
			wantRule = tt.rule
		}
		if denied != tt.denied || drule != wantRule {
			t.Errorf("DeniedAddr(%s) = %v, %q; want %v, %q", tt.addr, denied, drule, tt.denied, wantRule)
		}
	}
}

func FuzzRule(f *testing.F) {
	for _, s := range []string{"example.org", "*.Example.org.", "1.2.3.4", "::ffff:10.0.0.0/104",
		"2001:db8::/32", "https://x/y", "x:1", "[::1]:2", "a.*.b", "1.2.3", "fe80::1%x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("ParseRule(%q): empty error", s)
			}
			return
		}
		if r.IsName() == r.prefix.IsValid() {
			t.Fatalf("ParseRule(%q) = %+v: want exactly one of name and prefix", s, r)
		}
		// The canonical form parses to the same rule.
		canon := r.prefix.String()
		if r.IsName() {
			canon = r.name
			if r.wild {
				canon = "*." + canon
			}
		}
		r2, err := ParseRule(canon)
		if r2.Text = r.Text; err != nil || r2 != r {
			t.Fatalf("ParseRule(%q) = %+v, but canonical %q gives %+v, %v", s, r, canon, r2, err)
		}
		rs := Rules{Allow: []Rule{r}}
		switch {
		case r.IsName() && !r.wild:
			if ok, _ := rs.Name(strings.ToUpper(r.name) + "."); !ok {
				t.Fatalf("rule %q does not match its own name", s)
			}
		case r.IsName():
			if ok, _ := rs.Name("x." + r.name); !ok {
				t.Fatalf("rule %q does not match x.%s", s, r.name)
			}
		default:
			if ok, _ := rs.Addr(r.prefix.Addr()); !ok {
				t.Fatalf("rule %q does not match its own address", s)
			}
		}
	})
}
