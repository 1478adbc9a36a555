package config

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// quoted reads the single- or double-quoted scalar at byte off on line
// li; it must end on the same line. end is the offset after the closing
// quote.
func (p *parser) quoted(li, off int) (n node, end int, err error) {
	l := &p.lines[li]
	q := p.src[off]
	n = node{kind: scalarNode, style: singleStyle, pos: p.pos(li, off)}
	if q == '"' {
		n.style = doubleStyle
	}
	var b []byte // nil while the value is a plain substring of the source
	j := off + 1
	for {
		if j >= l.end {
			return node{}, 0, p.errAt(li, off, "unterminated quoted string (quoted values end on the line they start; use a block scalar | for several lines)")
		}
		c := p.src[j]
		switch {
		case c == q && q == '\'' && j+1 < l.end && p.src[j+1] == '\'':
			if b == nil {
				b = append(make([]byte, 0, j-off+8), p.src[off+1:j]...)
			}
			b = append(b, '\'')
			j += 2
			continue
		case c == q:
			if b == nil {
				n.value = p.src[off+1 : j]
			} else {
				n.value = string(b)
			}
			return n, j + 1, nil
		case c == '\\' && q == '"':
			if b == nil {
				b = append(make([]byte, 0, j-off+8), p.src[off+1:j]...)
			}
			r, size, err := p.escape(li, j)
			if err != nil {
				return node{}, 0, err
			}
			b = utf8.AppendRune(b, r)
			j += size
			continue
		}
		if b != nil {
			b = append(b, c)
		}
		j++
	}
}

// escape decodes the escape sequence at byte off (a backslash) and
// returns the rune and the sequence's length.
func (p *parser) escape(li, off int) (rune, int, error) {
	l := &p.lines[li]
	if off+1 >= l.end {
		return 0, 0, p.errAt(li, off, "a backslash at the end of a line is not supported in quoted strings")
	}
	switch c := p.src[off+1]; c {
	case '0':
		return 0, 2, nil
	case 'a':
		return '\a', 2, nil
	case 'b':
		return '\b', 2, nil
	case 't', '\t':
		return '\t', 2, nil
	case 'n':
		return '\n', 2, nil
	case 'v':
		return '\v', 2, nil
	case 'f':
		return '\f', 2, nil
	case 'r':
		return '\r', 2, nil
	case 'e':
		return 0x1b, 2, nil
	case ' ', '"', '/', '\\':
		return rune(c), 2, nil
	case 'N':
		return 0x85, 2, nil
	case '_':
		return 0xa0, 2, nil
	case 'L':
		return 0x2028, 2, nil
	case 'P':
		return 0x2029, 2, nil
	case 'x', 'u', 'U':
		digits := 2
		if c == 'u' {
			digits = 4
		} else if c == 'U' {
			digits = 8
		}
		if off+2+digits > l.end {
			return 0, 0, p.errAt(li, off, "escape \\%c needs %d hex digits", c, digits)
		}
		v, err := strconv.ParseUint(p.src[off+2:off+2+digits], 16, 32)
		if err != nil {
			return 0, 0, p.errAt(li, off, "escape \\%c needs %d hex digits", c, digits)
		}
		if v > utf8.MaxRune || v >= 0xd800 && v <= 0xdfff {
			return 0, 0, p.errAt(li, off, "escape %s is not a valid character", p.src[off:off+2+digits])
		}
		return rune(v), 2 + digits, nil
	}
	_, size := utf8.DecodeRuneInString(p.src[off+1:])
	return 0, 0, p.errAt(li, off, "unknown escape \\%s", p.src[off+1:off+1+size])
}

// blockScalar parses a literal (|) or folded (>) scalar whose header is
// at byte off on line li.
func (p *parser) blockScalar(li, off, parent int) (node, error) {
	n := node{kind: scalarNode, style: literalStyle, pos: p.pos(li, off)}
	if p.src[off] == '>' {
		n.style = foldedStyle
	}
	chomp, explicit, err := p.blockHeader(li, off)
	if err != nil {
		return node{}, err
	}
	indent := max(parent, 0) + explicit
	if explicit == 0 {
		if indent, err = p.blockIndent(li, parent); err != nil {
			return node{}, err
		}
	}

	// Collect the content lines.
	var text []string
	k := li + 1
	for ; k < len(p.lines); k++ {
		pl := &p.lines[k]
		if pl.marker != 0 {
			break
		}
		s := p.src[pl.off:pl.end]
		sp := 0
		for sp < len(s) && sp < indent && s[sp] == ' ' {
			sp++
		}
		if sp == indent {
			text = append(text, s[indent:])
		} else if sp == len(s) {
			text = append(text, "")
		} else {
			break
		}
	}
	p.i = k
	n.value = chompText(n.style, text, chomp)
	return n, nil
}

// blockHeader reads a block scalar's header after its | or > at off: the
// chomping indicator ('-' strip, '+' keep, 0 clip) and the indentation
// indicator (0 for none).
func (p *parser) blockHeader(li, off int) (chomp byte, explicit int, err error) {
	l := &p.lines[li]
	j := off + 1
	for ; j < l.end && j < off+3; j++ {
		c := p.src[j]
		if (c == '-' || c == '+') && chomp == 0 {
			chomp = c
		} else if c >= '1' && c <= '9' && explicit == 0 {
			explicit = int(c - '0')
		} else if c == '0' {
			return 0, 0, p.errAt(li, j, "a block scalar's indentation indicator is 1 to 9")
		} else {
			break
		}
	}
	if j < l.end && p.src[j] != ' ' && p.src[j] != '\t' {
		return 0, 0, p.errAt(li, j, "invalid block scalar header: use |, |-, |+, > , >- or >+")
	}
	return chomp, explicit, p.endOfLine(li, j, "after the block scalar header")
}

// blockIndent finds the indentation of a block scalar without an
// indentation indicator: the first line with text sets it; without one,
// the longest leading empty line does.
func (p *parser) blockIndent(li, parent int) (int, error) {
	indent, maxEmpty, emptyLine, found := 0, 0, 0, false
	for k := li + 1; k < len(p.lines); k++ {
		s := p.src[p.lines[k].off:p.lines[k].end]
		sp := 0
		for sp < len(s) && s[sp] == ' ' {
			sp++
		}
		if sp < len(s) || p.lines[k].marker != 0 {
			indent, found = sp, sp > parent && p.lines[k].marker == 0
			break
		}
		if sp > maxEmpty {
			maxEmpty, emptyLine = sp, k
		}
	}
	switch {
	case found && maxEmpty > indent:
		return 0, p.errAt(emptyLine, p.lines[emptyLine].off+indent,
			"a leading empty line of a block scalar has more spaces than its first line")
	case !found:
		indent = max(parent+1, maxEmpty)
	}
	return indent, nil
}

// chompText joins a block scalar's lines (literally or folded) and
// chomps its trailing empty lines as chomp says.
func chompText(st style, text []string, chomp byte) string {
	last := len(text)
	for last > 0 && text[last-1] == "" {
		last--
	}
	trailing := len(text) - last
	var b strings.Builder
	if st == literalStyle {
		for i, t := range text[:last] {
			if i > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(t)
		}
	} else {
		fold(&b, text[:last])
	}
	switch {
	case chomp == '+':
		if last > 0 {
			b.WriteByte('\n')
		}
		for range trailing {
			b.WriteByte('\n')
		}
	case chomp == 0 && last > 0:
		b.WriteByte('\n')
	}
	return b.String()
}

// fold joins the lines of a folded scalar: a line break between two
// lines of text becomes a space, empty lines become line breaks, and
// lines indented more than the rest keep their line breaks.
func fold(b *strings.Builder, text []string) {
	breaks := 0
	prevMore, first := false, true
	for _, t := range text {
		if t == "" {
			breaks++
			continue
		}
		more := t[0] == ' ' || t[0] == '\t'
		switch {
		case first:
			for range breaks {
				b.WriteByte('\n')
			}
		case breaks == 0 && !more && !prevMore:
			b.WriteByte(' ')
		case more || prevMore:
			for range breaks + 1 {
				b.WriteByte('\n')
			}
		default:
			for range breaks {
				b.WriteByte('\n')
			}
		}
		b.WriteString(t)
		breaks, prevMore, first = 0, more, false
	}
}
