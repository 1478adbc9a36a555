package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Rule is one --allow or --deny entry.
type Rule struct {
	// Text is the entry as the user wrote it (surrounding space trimmed), so
	// that decisions can be reported in the user's own words.
	Text string

	name   string       // lowercased, no trailing dot; "" for address rules
	wild   bool         // name matches strictly below itself
	prefix netip.Prefix // valid for address rules; a bare IP is a full-length prefix
	// raw ("tcp:NAME"): connections to the name's addresses may carry a
	// protocol the name check does not read (SSH, a database), not only
	// TLS and HTTP.
	raw bool
}

// RawPrefix marks an allow entry whose addresses may carry any TCP
// protocol: "tcp:git.example.org".
const RawPrefix = "tcp:"

// ruleHint is appended to errors that cannot point at a better form.
const ruleHint = `want a host name (example.org), a wildcard (*.example.org), an IP (192.0.2.1, 2001:db8::1) or a CIDR (10.0.0.0/8, 2001:db8::/32)`

// ParseRule parses "example.org", "*.example.org", an IP ("1.2.3.4",
// "2001:db8::1") or a CIDR ("10.0.0.0/8", "2001:db8::/32").
func ParseRule(s string) (Rule, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return Rule{}, errors.New("empty rule: " + ruleHint)
	}
	rest, raw := cutPrefixFold(t, RawPrefix)
	if raw {
		rest = strings.TrimSpace(rest)
	}
	r, err := parseRule(rest)
	if err != nil {
		return Rule{}, fmt.Errorf("rule %q: %w", t, err)
	}
	if raw && !r.IsName() {
		// Addresses an entry lists are reached without a name check
		// already: the prefix would say nothing.
		return Rule{}, fmt.Errorf("rule %q: %q applies to names only (an address or CIDR entry is not name-checked); give %q", t, RawPrefix, rest)
	}
	r.Text, r.raw = t, raw
	return r, nil
}

// cutPrefixFold is strings.CutPrefix with ASCII case folded.
func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && lowerASCII(s[:len(prefix)]) == prefix {
		return s[len(prefix):], true
	}
	return s, false
}

// parseRule classifies t by its most telling character first, so that each
// mistake gets the hint that fits it rather than a generic one.
func parseRule(t string) (Rule, error) {
	switch {
	case strings.Contains(t, "://"):
		return Rule{}, hostOnly("a URL is not a rule", urlHost(t))
	case strings.HasPrefix(t, "["):
		return Rule{}, bracketError(t)
	case strings.Contains(t, "/"):
		return parsePrefix(t)
	}
	if a, err := netip.ParseAddr(t); err == nil {
		return addrRule(a)
	}
	switch {
	case strings.Contains(t, ":"):
		return Rule{}, colonError(t)
	case strings.Contains(t, "*"):
		return parseWildcard(t)
	case isDigitsDots(t):
		return Rule{}, errors.New("not a valid IPv4 address; want four numbers 0-255 like 192.0.2.1")
	}
	name, err := checkName(t)
	if err != nil {
		return Rule{}, err
	}
	return Rule{name: name}, nil
}

// hostOnly says what is wrong and, when one was found, which host to give.
func hostOnly(what, host string) error {
	if host == "" {
		return errors.New(what + "; give the host name only, e.g. example.org")
	}
	return fmt.Errorf("%s; give the host name only: %q", what, host)
}

// urlHost digs the host out of a URL for the error hint.
func urlHost(t string) string {
	_, rest, _ := strings.Cut(t, "://")
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = rest[i+1:]
	}
	return lowerASCII(stripPort(rest))
}

// stripPort drops a ":port" suffix, including from "[v6]:port".
func stripPort(hp string) string {
	if strings.HasPrefix(hp, "[") {
		if i := strings.Index(hp, "]"); i > 0 {
			return hp[1:i]
		}
		return hp
	}
	if strings.Count(hp, ":") == 1 {
		hp, _, _ = strings.Cut(hp, ":")
	}
	return hp
}

// bracketError explains "[v6]" and "[v6]:port", which are URL syntax.
func bracketError(t string) error {
	inner, rest, ok := strings.Cut(t[1:], "]")
	if _, err := netip.ParseAddr(inner); !ok || err != nil {
		return errors.New("not a valid IP address in brackets; " + ruleHint)
	}
	if rest == "" {
		return fmt.Errorf("IPv6 addresses are written without brackets: %q", inner)
	}
	if strings.HasPrefix(rest, ":") {
		return fmt.Errorf("ports are not part of a rule; give %q", inner)
	}
	return errors.New("unexpected text after ']'; " + ruleHint)
}

// parsePrefix handles anything with a '/': a CIDR, or a URL without a scheme.
func parsePrefix(t string) (Rule, error) {
	p, err := netip.ParsePrefix(t)
	if err != nil {
		// Only an IP-looking part before the '/' makes this a CIDR attempt.
		before, _, _ := strings.Cut(t, "/")
		if !isDigitsDots(before) && strings.Count(before, ":") < 2 {
			return Rule{}, hostOnly("paths are not part of a rule", lowerASCII(stripPort(before)))
		}
		return Rule{}, fmt.Errorf("not a valid CIDR, want e.g. 10.0.0.0/8 or 2001:db8::/32: %w", err)
	}
	if m := p.Masked(); m != p {
		return Rule{}, fmt.Errorf("address bits are set beyond the /%d prefix; did you mean %q?", p.Bits(), m.String())
	}
	return Rule{prefix: unmapPrefix(p)}, nil
}

// unmapPrefix turns ::ffff:a.b.c.d/n (n >= 96) into a.b.c.d/(n-96), because
// Addr treats mapped addresses as IPv4 and would otherwise never match.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if !p.Addr().Is4In6() || p.Bits() < 96 {
		return p
	}
	return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
}

// colonError explains a ':' that is not part of a valid IPv6 address:
// usually host:port.
func colonError(t string) error {
	if host, port, _ := strings.Cut(t, ":"); strings.Count(t, ":") == 1 && host != "" && isDigits(port) {
		return fmt.Errorf("ports are not part of a rule; give %q", lowerASCII(host))
	}
	return errors.New("not a valid IPv6 address (and ':' is not allowed in a host name); " + ruleHint)
}

// addrRule makes a single-address rule; zones are refused because a zoned
// address never matches a prefix.
func addrRule(a netip.Addr) (Rule, error) {
	if a.Zone() != "" {
		return Rule{}, fmt.Errorf("zones are not supported; give the address without %%%s", a.Zone())
	}
	a = a.Unmap()
	return Rule{prefix: netip.PrefixFrom(a, a.BitLen())}, nil
}

// parseWildcard accepts only a whole leading "*" label, the one form whose
// meaning ("every name below") is unambiguous.
func parseWildcard(t string) (Rule, error) {
	const hint = `wildcards are written "*.example.org" (a "*" only as the whole first label)`
	if t == "*" || t == "*." {
		return Rule{}, errors.New(`a lone "*" is not allowed (it would match every name); ` + hint)
	}
	base, ok := strings.CutPrefix(t, "*.")
	if !ok || strings.Contains(base, "*") {
		return Rule{}, errors.New(hint)
	}
	name, err := checkName(base)
	if err != nil {
		return Rule{}, err
	}
	return Rule{name: name, wild: true}, nil
}

// checkName validates and canonicalises a host name.
func checkName(s string) (string, error) {
	name := lowerASCII(strings.TrimSuffix(s, "."))
	if name == "" {
		return "", errors.New("empty host name; " + ruleHint)
	}
	if len(name) > 253 {
		return "", fmt.Errorf("host name is %d characters long; the limit is 253", len(name))
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if err := checkLabel(l); err != nil {
			return "", err
		}
	}
	if isDigits(labels[len(labels)-1]) {
		return "", errors.New("a host name cannot end in an all-digit label; if this is an IP address it is malformed (want e.g. 192.0.2.1)")
	}
	return name, nil
}

func checkLabel(l string) error {
	if l == "" {
		return errors.New(`empty label in host name (two dots in a row?); want e.g. "www.example.org"`)
	}
	if len(l) > 63 {
		return fmt.Errorf("a label of the host name is %d characters long; the limit is 63", len(l))
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case c >= 0x80:
			return errors.New("host name is not ASCII; give its punycode form (xn--...)")
		case !isNameChar(c):
			return fmt.Errorf("%q is not allowed in a host name; use letters, digits, '-' and '_'", c)
		}
	}
	return nil
}

func isNameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// isDigitsDots spots an attempted (but invalid) IPv4 address like "1.2.3".
func isDigitsDots(s string) bool {
	return s != "" && strings.Trim(s, "0123456789.") == "" && strings.ContainsAny(s, "0123456789")
}

// lowerASCII folds only A-Z: DNS is case-insensitive in ASCII alone, and
// Unicode folding would let e.g. the Kelvin sign match a rule's 'k'.
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if c := b[j]; c >= 'A' && c <= 'Z' {
					b[j] = c + 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// IsName reports whether r is a host name or wildcard rule (not an address).
func (r Rule) IsName() bool { return r.name != "" }

// matchName expects name already canonical (lowercased, no trailing dot).
func (r Rule) matchName(name string) bool {
	if r.name == "" {
		return false
	}
	if !r.wild {
		return name == r.name
	}
	// Strictly below: at least one non-empty label before ".base".
	n := len(name) - len(r.name)
	return n > 1 && name[n-1] == '.' && name[n:] == r.name
}

// Rules is an allow list and a deny list; deny entries win.
type Rules struct {
	Allow, Deny []Rule
}

// ParseRules parses both lists; the first error wins and names its list.
func ParseRules(allow, deny []string) (Rules, error) {
	var rs Rules
	var err error
	if rs.Allow, err = parseList(allow); err != nil {
		return Rules{}, fmt.Errorf("allow: %w", err)
	}
	if rs.Deny, err = parseList(deny); err != nil {
		return Rules{}, fmt.Errorf("deny: %w", err)
	}
	for _, r := range rs.Deny {
		if r.raw {
			return Rules{}, fmt.Errorf("deny: rule %q: %q is for allow entries; a deny entry refuses every protocol", r.Text, RawPrefix)
		}
	}
	return rs, nil
}

func parseList(ss []string) ([]Rule, error) {
	var out []Rule
	for _, s := range ss {
		r, err := ParseRule(s)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// Name reports whether a DNS name may be resolved: allowed when some allow
// name rule matches and no deny name rule matches. rule is the Text of the
// deciding rule ("" when no rule matched). A wildcard "*.example.org"
// matches every name below example.org at any depth, not example.org
// itself; a plain name matches only itself. Matching is case-insensitive
// and ignores a trailing dot.
func (r *Rules) Name(name string) (ok bool, rule string) {
	name = lowerASCII(strings.TrimSuffix(name, "."))
	if d, ok := firstName(r.Deny, name); ok {
		return false, d
	}
	if a, ok := firstName(r.Allow, name); ok {
		return true, a
	}
	return false, ""
}

// RawTCP reports whether connections to the addresses name resolved to
// may carry protocols the name check does not read: an allow entry
// "tcp:NAME" (or "tcp:*.BASE") matches it and no deny entry does.
func (r *Rules) RawTCP(name string) bool {
	name = lowerASCII(strings.TrimSuffix(name, "."))
	if _, denied := firstName(r.Deny, name); denied {
		return false
	}
	for _, x := range r.Allow {
		if x.raw && x.matchName(name) {
			return true
		}
	}
	return false
}

func firstName(rs []Rule, name string) (string, bool) {
	for _, x := range rs {
		if x.matchName(name) {
			return x.Text, true
		}
	}
	return "", false
}

// Addr reports whether a connection to a may go out by the CIDR/IP rules
// alone: deny CIDRs win over allow CIDRs; name rules are ignored here.
// IPv4-mapped IPv6 addresses are treated as IPv4.
func (r *Rules) Addr(a netip.Addr) (ok bool, rule string) {
	if denied, d := r.DeniedAddr(a); denied {
		return false, d
	}
	if x, ok := firstAddr(r.Allow, a); ok {
		return true, x
	}
	return false, ""
}

// DeniedAddr reports whether a deny CIDR rule matches a (used to veto
// addresses learned from allowed names).
func (r *Rules) DeniedAddr(a netip.Addr) (denied bool, rule string) {
	x, ok := firstAddr(r.Deny, a)
	return ok, x
}

func firstAddr(rs []Rule, a netip.Addr) (string, bool) {
	// A zoned address never matches a prefix, which would slip past deny
	// rules; the zone says nothing about the destination, so drop it.
	a = a.Unmap().WithZone("")
	for _, x := range rs {
		if x.prefix.IsValid() && x.prefix.Contains(a) {
			return x.Text, true
		}
	}
	return "", false
}
