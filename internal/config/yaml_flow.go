package config

import (
	"strings"
)

// flowParser reads a flow collection ([a, b], {k: v}), which may go on
// over several lines.
type flowParser struct {
	p      *parser
	li     int // the current line
	off    int // the current byte offset
	parent int // continuation lines must be indented more than this
	depth  int
}

// space skips white space, comments and line breaks.
func (f *flowParser) space() error {
	p := f.p
	for {
		l := &p.lines[f.li]
		for f.off < l.end && (p.src[f.off] == ' ' || p.src[f.off] == '\t') {
			f.off++
		}
		if f.off < l.end && !(p.src[f.off] == '#' && (f.off == l.off || p.src[f.off-1] == ' ' || p.src[f.off-1] == '\t')) {
			return nil
		}
		if f.li+1 >= len(p.lines) {
			f.off = l.end
			return nil
		}
		f.li++
		nl := &p.lines[f.li]
		f.off = nl.off
		if nl.marker != 0 {
			return p.errAt(f.li, nl.off, "a document marker inside a [ ] or { } collection")
		}
		if !nl.blank && nl.indent <= f.parent {
			return p.errAt(f.li, nl.off+nl.indent, "the lines of a [ ] or { } collection must be indented more than its key")
		}
	}
}

// atEnd reports whether the source ends at the current offset.
func (f *flowParser) atEnd() bool {
	return f.off >= f.p.lines[f.li].end && f.li+1 >= len(f.p.lines)
}

func (f *flowParser) value() (node, error) {
	p := f.p
	if f.off >= p.lines[f.li].end {
		return node{}, p.errAt(f.li, f.off, "a value is missing")
	}
	switch c := p.src[f.off]; c {
	case '[', '{':
		if f.depth >= maxDepth {
			return node{}, p.errAt(f.li, f.off, "collections are nested too deeply")
		}
		f.depth++
		defer func() { f.depth-- }()
		if c == '[' {
			return f.seq()
		}
		return f.mapping()
	case '"', '\'':
		n, end, err := p.quoted(f.li, f.off)
		f.off = end
		return n, err
	case '|', '>':
		return node{}, p.errAt(f.li, f.off, "block scalars (| and >) cannot be inside [ ] or { }")
	case '-', '?':
		if l := &p.lines[f.li]; f.off+1 == l.end || p.src[f.off+1] == ' ' || p.src[f.off+1] == '\t' {
			return node{}, p.errAt(f.li, f.off, "%q cannot start a value inside [ ] or { }; quote it", string(c))
		}
	case ':':
		return node{}, p.errAt(f.li, f.off, "a key is missing before ':'")
	}
	if err := p.badStart(f.li, f.off, p.src[f.off]); err != nil {
		return node{}, err
	}
	// A plain scalar inside a flow collection ends at , [ ] { }, at ": ",
	// at a comment or at the end of the line.
	l := &p.lines[f.li]
	start, end := f.off, f.off
	j := f.off
scan:
	for ; j < l.end; j++ {
		switch c := p.src[j]; c {
		case ',', '[', ']', '{', '}':
			break scan
		case ':':
			if j+1 == l.end || strings.IndexByte(" \t,[]{}", p.src[j+1]) >= 0 {
				break scan
			}
		case '#':
			if p.src[j-1] == ' ' || p.src[j-1] == '\t' {
				break scan
			}
		}
		if c := p.src[j]; c != ' ' && c != '\t' {
			end = j + 1
		}
	}
	f.off = end
	return node{kind: scalarNode, pos: p.pos(f.li, start), value: p.src[start:end]}, nil
}

func (f *flowParser) seq() (node, error) {
	p := f.p
	open := f.li
	n := node{kind: seqNode, flow: true, pos: p.pos(f.li, f.off)}
	openPos := n.pos
	mark := len(p.stack)
	f.off++
	for {
		if err := f.space(); err != nil {
			return node{}, err
		}
		if f.atEnd() {
			return node{}, p.errAt(f.li, f.off, "unterminated [ (opened at line %d, column %d)", openPos.Line, openPos.Col)
		}
		if p.src[f.off] == ']' {
			f.off++
			n.items = p.collect(mark)
			return n, nil
		}
		if p.src[f.off] == ',' {
			return node{}, p.errAt(f.li, f.off, "an empty entry in a [ ] list")
		}
		v, err := f.value()
		if err != nil {
			return node{}, err
		}
		if err := f.space(); err != nil {
			return node{}, err
		}
		if !f.atEnd() && p.src[f.off] == ':' {
			return node{}, p.errAt(f.li, f.off, "key: value pairs inside [ ] are not supported; use { }")
		}
		p.stack = append(p.stack, v)
		if f.atEnd() {
			return node{}, p.errAt(f.li, f.off, "unterminated [ (opened at line %d, column %d)", openPos.Line, openPos.Col)
		}
		switch p.src[f.off] {
		case ',':
			f.off++
		case ']':
			f.off++
			n.items = p.collect(mark)
			return n, nil
		default:
			return node{}, p.errAt(f.li, f.off, "expected , or ] in the list opened at line %d", open+1)
		}
	}
}

func (f *flowParser) mapping() (node, error) {
	p := f.p
	n := node{kind: mapNode, flow: true, pos: p.pos(f.li, f.off)}
	openPos := n.pos
	var seen map[string]int
	mark := len(p.stack)
	f.off++
	for {
		if err := f.space(); err != nil {
			return node{}, err
		}
		if f.atEnd() {
			return node{}, p.errAt(f.li, f.off, "unterminated { (opened at line %d, column %d)", openPos.Line, openPos.Col)
		}
		switch p.src[f.off] {
		case '}':
			f.off++
			n.items = p.collect(mark)
			return n, nil
		case ',':
			return node{}, p.errAt(f.li, f.off, "an empty entry in a { } mapping")
		case '[', '{':
			return node{}, p.errAt(f.li, f.off, "a [ ] or { } collection cannot be a key")
		}
		keyLine, keyOff := f.li, f.off
		k, err := f.value()
		if err != nil {
			return node{}, err
		}
		if k.style == plainStyle {
			if err := p.checkPlainKey(keyLine, keyOff, k.value); err != nil {
				return node{}, err
			}
		}
		if dup := p.duplicate(p.stack[mark:], &seen, &k); dup > 0 {
			return node{}, p.errAt(keyLine, keyOff, "duplicate key %q (first at line %d)", k.value, dup)
		}
		if err := f.space(); err != nil {
			return node{}, err
		}
		if f.atEnd() || p.src[f.off] != ':' {
			return node{}, p.errAt(f.li, f.off, "expected ':' after the key %q", k.value)
		}
		colonLine, colonOff := f.li, f.off
		f.off++
		if err := f.space(); err != nil {
			return node{}, err
		}
		var v node
		if !f.atEnd() && (p.src[f.off] == ',' || p.src[f.off] == '}') {
			v = node{kind: scalarNode, null: true, pos: p.pos(colonLine, colonOff+1)}
		} else if v, err = f.value(); err != nil {
			return node{}, err
		}
		p.stack = append(p.stack, k, v)
		if err := f.space(); err != nil {
			return node{}, err
		}
		if f.atEnd() {
			return node{}, p.errAt(f.li, f.off, "unterminated { (opened at line %d, column %d)", openPos.Line, openPos.Col)
		}
		switch p.src[f.off] {
		case ',':
			f.off++
		case '}':
			f.off++
			n.items = p.collect(mark)
			return n, nil
		default:
			return node{}, p.errAt(f.li, f.off, "expected , or } in the mapping opened at line %d", openPos.Line)
		}
	}
}
