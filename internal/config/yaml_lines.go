package config

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// line is one line of the source.
type line struct {
	off, end int // byte offsets of the line's start and end (before \r\n or \n)
	// indent is the number of leading spaces, or -1 for a document
	// marker ("---", "..."), which ends every block.
	indent int
	marker byte // '-' for ---, '.' for ..., else 0
	ascii  bool // no multi-byte characters: columns are byte offsets
	blank  bool // only spaces and tabs, or a comment
	tab    bool // a tab in the leading white space of a non-blank line
}

// split cuts the source into lines and refuses characters YAML does not
// allow (control characters, invalid UTF-8, lone carriage returns).
func (p *parser) split() error {
	src := p.src
	start := 0
	if strings.HasPrefix(src, "\uFEFF") {
		start = 3
	}
	p.lines = make([]line, 0, strings.Count(src, "\n")+1)
	for start < len(src) {
		l := line{off: start, ascii: true}
		i := start
		for i < len(src) && src[i] != '\n' {
			c := src[i]
			if c >= utf8.RuneSelf {
				r, size := utf8.DecodeRuneInString(src[i:])
				if r == utf8.RuneError && size == 1 {
					return p.badLine(l, i, "invalid UTF-8")
				}
				if r == 0xfeff {
					return p.badLine(l, i, "a byte order mark (U+FEFF) is only allowed at the start of the file")
				}
				if r >= 0x80 && r <= 0x9f && r != 0x85 {
					return p.badLine(l, i, fmt.Sprintf("control character U+%04X is not allowed", r))
				}
				l.ascii = false
				i += size
				continue
			}
			if c < 0x20 && c != '\t' && !(c == '\r' && (i+1 == len(src) || src[i+1] == '\n')) || c == 0x7f {
				if c == '\r' {
					return p.badLine(l, i, "a lone carriage return: use \\n or \\r\\n line endings")
				}
				return p.badLine(l, i, fmt.Sprintf("control character U+%04X is not allowed", c))
			}
			i++
		}
		l.end = i
		if l.end > l.off && src[l.end-1] == '\r' {
			l.end--
		}
		p.scanIndent(&l)
		p.lines = append(p.lines, l)
		start = i + 1
	}
	return nil
}

// badLine reports a character the parser refuses at byte off of the
// line l, which is being split.
func (p *parser) badLine(l line, off int, msg string) error {
	l.end = len(p.src)
	if j := strings.IndexByte(p.src[l.off:], '\n'); j >= 0 {
		l.end = l.off + j
	}
	l.ascii = false
	p.lines = append(p.lines, l)
	e := p.errAt(len(p.lines)-1, off, "%s", msg)
	e.Line = strings.ToValidUTF8(e.Line, "\uFFFD")
	return e
}

// scanIndent fills in a line's indentation and kind.
func (p *parser) scanIndent(l *line) {
	s := p.src[l.off:l.end]
	n := 0
	for n < len(s) && s[n] == ' ' {
		n++
	}
	l.indent = n
	j := n
	for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
		j++
	}
	l.blank = j == len(s) || s[j] == '#'
	l.tab = !l.blank && j > n
	if (strings.HasPrefix(s, "---") || strings.HasPrefix(s, "...")) && (len(s) == 3 || s[3] == ' ' || s[3] == '\t') {
		l.marker = s[0]
		l.indent = -1
		l.blank = false
		l.tab = false
	}
}

// skip returns the index of the first line from li on that is not blank
// or a comment (len(p.lines) at the end).
func (p *parser) skip(li int) (int, error) {
	for ; li < len(p.lines); li++ {
		l := &p.lines[li]
		if l.blank {
			continue
		}
		if l.tab {
			j := l.off + l.indent
			for p.src[j] == ' ' {
				j++
			}
			return li, p.errAt(li, j, "tabs are not allowed for indentation; use spaces")
		}
		return li, nil
	}
	return li, nil
}

// content returns line li from its indentation on.
func (p *parser) content(li int) string {
	l := &p.lines[li]
	return p.src[l.off+l.indent : l.end]
}

// pos is the position of byte offset off on line li.
func (p *parser) pos(li, off int) Pos {
	l := &p.lines[li]
	if off > l.end {
		off = l.end
	}
	if l.ascii {
		return Pos{li + 1, off - l.off + 1}
	}
	return Pos{li + 1, utf8.RuneCountInString(p.src[l.off:off]) + 1}
}

func (p *parser) errAt(li, off int, format string, a ...any) *Error {
	msg := format
	if len(a) > 0 {
		msg = fmt.Sprintf(format, a...)
	}
	l := &p.lines[li]
	return &Error{Path: p.path, Pos: p.pos(li, off), Msg: msg, Line: p.src[l.off:l.end]}
}

// endOfLine checks that nothing but white space and a comment follows
// off on line li.
func (p *parser) endOfLine(li, off int, what string) error {
	l := &p.lines[li]
	j := off
	for j < l.end && (p.src[j] == ' ' || p.src[j] == '\t') {
		j++
	}
	if j == l.end || p.src[j] == '#' && j > off {
		return nil
	}
	return p.errAt(li, j, "unexpected text %s", what)
}
