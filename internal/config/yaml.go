package config

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// This file is a parser for the strict subset of YAML that pinfold.yaml
// uses: block mappings and sequences, flow sequences and mappings, plain,
// quoted and block scalars, and comments. It keeps every scalar as a
// string (no "no" meaning false, no octal), records where each node
// starts, and refuses what a policy file has no use for: anchors,
// aliases, tags, merge keys, several documents, duplicate keys and tabs
// in indentation. It is written for start-up time: no package state, one
// pass over the lines, and scalars that share the source string.

// kind is the kind of a node.
type kind uint8

const (
	scalarNode kind = iota + 1
	mapNode
	seqNode
)

// style is how a scalar was written.
type style uint8

const (
	plainStyle style = iota
	singleStyle
	doubleStyle
	literalStyle
	foldedStyle
)

// node is a parsed YAML node.
type node struct {
	kind  kind
	style style
	null  bool // nothing was written ("key:" and no value)
	flow  bool // a [ ] or { } collection
	pos   Pos
	value string // a scalar's text
	// items are a sequence's elements, or a mapping's keys and values
	// in turn (key, value, key, value...); keys are scalars.
	items []node
}

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

type parser struct {
	path  string
	src   string
	lines []line
	i     int // the next line to parse
	depth int // of nested block collections
	// stack holds the items of the collections being parsed; each
	// collection copies its own out when it ends, so its slice is
	// allocated once, at its final size.
	stack []node
}

// maxDepth bounds how deeply collections nest; a config needs a handful
// of levels, and the bound keeps the recursion of hostile input short.
const maxDepth = 64

// parseYAML parses src, one document, into a node tree. An empty
// document gives a null node.
func parseYAML(path, src string) (node, error) {
	p := &parser{path: path, src: src}
	return p.parse()
}

func (p *parser) parse() (node, error) {
	p.stack = make([]node, 0, 64)
	if err := p.split(); err != nil {
		return node{}, err
	}
	li, err := p.skip(0)
	if err != nil {
		return node{}, err
	}
	n := len(p.lines)
	if li < n && p.lines[li].marker == '-' {
		if err := p.endOfLine(li, p.lines[li].off+3, "after ---"); err != nil {
			return node{}, err
		}
		if li, err = p.skip(li + 1); err != nil {
			return node{}, err
		}
	}
	var root node
	rootIndent := 0
	if li < n {
		rootIndent = p.lines[li].indent
	}
	if li >= n || p.lines[li].marker != 0 {
		root = node{kind: scalarNode, null: true, pos: Pos{1, 1}}
		p.i = li
	} else if root, err = p.parseBlock(li, -1); err != nil {
		return node{}, err
	}
	if li, err = p.skip(p.i); err != nil || li >= n {
		return root, err
	}
	if p.lines[li].marker == '.' {
		if err := p.endOfLine(li, p.lines[li].off+3, "after ..."); err != nil {
			return node{}, err
		}
		if li, err = p.skip(li + 1); err != nil || li >= n {
			return root, err
		}
		if p.lines[li].marker == 0 {
			return node{}, p.errAt(li, p.lines[li].off+p.lines[li].indent, "content after the end of the document (...)")
		}
	}
	if p.lines[li].marker != 0 {
		return node{}, p.errAt(li, p.lines[li].off, "multiple documents are not supported: pinfold.yaml holds one")
	}
	if p.lines[li].indent > rootIndent {
		return node{}, p.errAt(li, p.lines[li].off+p.lines[li].indent,
			"unexpected indentation: a value that goes on over several lines must be quoted or a block scalar (|)")
	}
	return node{}, p.errAt(li, p.lines[li].off+p.lines[li].indent,
		"inconsistent indentation: this line is indented less than the first line of the file")
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

// isItem reports whether s (a line from its indentation on) starts a
// sequence item.
func isItem(s string) bool {
	return len(s) > 0 && s[0] == '-' && (len(s) == 1 || s[1] == ' ' || s[1] == '\t')
}

// parseBlock parses the block node that starts on line li, whose
// enclosing collection is indented by parent columns (-1 for the root).
func (p *parser) parseBlock(li, parent int) (node, error) {
	if p.depth >= maxDepth {
		l := &p.lines[li]
		return node{}, p.errAt(li, l.off+l.indent, "collections are nested too deeply")
	}
	p.depth++
	defer func() { p.depth-- }()
	s := p.content(li)
	if isItem(s) {
		return p.parseSeq(li, false)
	}
	if _, ok, err := p.keyEnd(li); err != nil {
		return node{}, err
	} else if ok {
		return p.parseMap(li)
	}
	l := &p.lines[li]
	return p.parseValue(li, l.off+l.indent, parent, false)
}

// keyEnd finds the ':' that ends the key at the start of line li's
// content; ok is false when the line holds no key.
func (p *parser) keyEnd(li int) (colon int, ok bool, err error) {
	l := &p.lines[li]
	start := l.off + l.indent
	s := p.src[start:l.end]
	j := 0
	switch s[0] {
	case '"', '\'':
		_, n, err := p.quoted(li, start)
		if err != nil {
			return 0, false, err
		}
		j = n - start
		for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
			j++
		}
		if j < len(s) && s[j] == ':' && (j+1 == len(s) || s[j+1] == ' ' || s[j+1] == '\t') {
			return start + j, true, nil
		}
		return 0, false, nil
	case '[', '{', '|', '>', '#':
		return 0, false, nil
	}
	for ; j < len(s); j++ {
		switch s[j] {
		case ':':
			if j+1 == len(s) || s[j+1] == ' ' || s[j+1] == '\t' {
				return start + j, true, nil
			}
		case '#':
			if j > 0 && (s[j-1] == ' ' || s[j-1] == '\t') {
				return 0, false, nil
			}
		}
	}
	return 0, false, nil
}

// parseMap parses a block mapping whose first key is on line li.
func (p *parser) parseMap(li int) (node, error) {
	indent := p.lines[li].indent
	m := node{kind: mapNode, pos: p.pos(li, p.lines[li].off+indent)}
	first := li
	mark := len(p.stack)
	var seen map[string]int // keys by line, once the mapping is large
	for {
		l := &p.lines[li]
		start := l.off + l.indent
		colon, ok, err := p.keyEnd(li)
		if err != nil {
			return node{}, err
		}
		if !ok {
			if isItem(p.content(li)) {
				return node{}, p.errAt(li, start, "expected a key (KEY: VALUE) like line %d, found a list item", first+1)
			}
			return node{}, p.errAt(li, start, "expected a key (KEY: VALUE) like line %d", first+1)
		}
		key, err := p.parseKey(li, start, colon)
		if err != nil {
			return node{}, err
		}
		if dup := p.duplicate(p.stack[mark:], &seen, &key); dup > 0 {
			return node{}, p.errAt(li, start, "duplicate key %q (first at line %d)", key.value, dup)
		}
		inline := false
		var val node
		j := colon + 1
		for j < l.end && (p.src[j] == ' ' || p.src[j] == '\t') {
			j++
		}
		if j == l.end || p.src[j] == '#' {
			// The value is on the next lines, or there is none.
			nli, err := p.skip(li + 1)
			if err != nil {
				return node{}, err
			}
			switch {
			case nli < len(p.lines) && p.lines[nli].indent > indent:
				val, err = p.parseBlock(nli, indent)
			case nli < len(p.lines) && p.lines[nli].indent == indent && isItem(p.content(nli)):
				val, err = p.parseSeq(nli, true) // "key:\n- item" at the key's indentation
			default:
				val = node{kind: scalarNode, null: true, pos: p.pos(li, colon+1)}
				p.i = li + 1
			}
			if err != nil {
				return node{}, err
			}
		} else {
			if val, err = p.parseValue(li, j, indent, true); err != nil {
				return node{}, err
			}
			inline = val.kind == scalarNode && (val.style == plainStyle || val.style == singleStyle || val.style == doubleStyle)
		}
		p.stack = append(p.stack, key, val)

		nli, err := p.skip(p.i)
		if err != nil {
			return node{}, err
		}
		if nli >= len(p.lines) || p.lines[nli].indent < indent {
			p.i = nli
			m.items = p.collect(mark)
			return m, nil
		}
		if nl := &p.lines[nli]; nl.indent > indent {
			msg := "inconsistent indentation: this line starts at column %d, but the keys of its mapping start at column %d (line %d)"
			if inline {
				msg += "; a value that goes on over several lines must be quoted or a block scalar (|)"
			}
			return node{}, p.errAt(nli, nl.off+nl.indent, msg, nl.indent+1, indent+1, first+1)
		}
		li = nli
	}
}

// parseKey reads the key on line li from start to the colon.
func (p *parser) parseKey(li, start, colon int) (node, error) {
	s := p.src[start:colon]
	if strings.TrimSpace(s) == "" {
		return node{}, p.errAt(li, start, "a key is missing before ':'")
	}
	switch s[0] {
	case '"', '\'':
		k, _, err := p.quoted(li, start)
		return k, err
	case '&':
		return node{}, p.errAt(li, start, "anchors (&) are not supported")
	case '*':
		return node{}, p.errAt(li, start, "aliases (*) are not supported")
	case '!':
		return node{}, p.errAt(li, start, "tags (!) are not supported")
	case '?':
		if len(s) == 1 || s[1] == ' ' || s[1] == '\t' {
			return node{}, p.errAt(li, start, "complex keys (?) are not supported")
		}
	case ':':
		return node{}, p.errAt(li, start, "a key is missing before ':'")
	case '%', '@', '`', ',', ']', '}':
		return node{}, p.errAt(li, start, "a key cannot start with %q; quote it", s[:1])
	}
	s = strings.TrimRight(s, " \t")
	if s == "<<" {
		return node{}, p.errAt(li, start, "merge keys (<<) are not supported")
	}
	return node{kind: scalarNode, pos: p.pos(li, start), value: s}, nil
}

// parseSeq parses a block sequence whose first item is on line li. A
// compact sequence sits at its key's indentation and ends at the first
// line there that is not an item.
func (p *parser) parseSeq(li int, compact bool) (node, error) {
	indent := p.lines[li].indent
	seq := node{kind: seqNode, pos: p.pos(li, p.lines[li].off+indent)}
	first := li
	mark := len(p.stack)
	for {
		l := &p.lines[li]
		dash := l.off + l.indent
		j := dash + 1
		if j < l.end && p.src[j] == '\t' {
			return node{}, p.errAt(li, j, "tabs are not allowed for indentation; use spaces")
		}
		for j < l.end && p.src[j] == ' ' {
			j++
		}
		var item node
		var err error
		switch {
		case j == l.end || p.src[j] == '#':
			nli, err := p.skip(li + 1)
			if err != nil {
				return node{}, err
			}
			if nli < len(p.lines) && p.lines[nli].indent > indent {
				item, err = p.parseBlock(nli, indent)
			} else {
				item = node{kind: scalarNode, null: true, pos: p.pos(li, dash+1)}
				p.i = li + 1
			}
			if err != nil {
				return node{}, err
			}
		case p.src[j] == '\t':
			return node{}, p.errAt(li, j, "tabs are not allowed for indentation; use spaces")
		default:
			// "- - x" and "- key: value": the rest of the line is a block
			// indented to where it starts.
			l.indent = j - l.off
			if _, isKey, kerr := p.keyEnd(li); kerr != nil {
				return node{}, kerr
			} else if isKey || isItem(p.src[j:l.end]) {
				item, err = p.parseBlock(li, indent)
			} else {
				item, err = p.parseValue(li, j, indent, false)
			}
			l.indent = indent
			if err != nil {
				return node{}, err
			}
		}
		p.stack = append(p.stack, item)

		nli, err := p.skip(p.i)
		if err != nil {
			return node{}, err
		}
		if nli >= len(p.lines) || p.lines[nli].indent < indent {
			p.i = nli
			seq.items = p.collect(mark)
			return seq, nil
		}
		nl := &p.lines[nli]
		if nl.indent > indent {
			return node{}, p.errAt(nli, nl.off+nl.indent,
				"inconsistent indentation: this line starts at column %d, but the items of its list start at column %d (line %d)",
				nl.indent+1, indent+1, first+1)
		}
		if !isItem(p.content(nli)) {
			if compact {
				p.i = nli
				seq.items = p.collect(mark)
				return seq, nil
			}
			return node{}, p.errAt(nli, nl.off+nl.indent, "expected a list item (- ...) like line %d", first+1)
		}
		li = nli
	}
}

// parseValue parses the value that starts at byte off on line li: a
// scalar, a flow collection or a block scalar. parent is the indentation
// of the enclosing block collection; afterKey is set for "key: value".
func (p *parser) parseValue(li, off, parent int, afterKey bool) (node, error) {
	l := &p.lines[li]
	s := p.src[off:l.end]
	switch s[0] {
	case '"', '\'':
		n, end, err := p.quoted(li, off)
		if err != nil {
			return node{}, err
		}
		if err := p.endOfLine(li, end, "after the quoted value"); err != nil {
			return node{}, err
		}
		p.i = li + 1
		return n, nil
	case '[', '{':
		f := flowParser{p: p, li: li, off: off, parent: parent}
		n, err := f.value()
		if err != nil {
			return node{}, err
		}
		what := "after the [ ] list"
		if s[0] == '{' {
			what = "after the { } mapping"
		}
		if err := p.endOfLine(f.li, f.off, what); err != nil {
			return node{}, err
		}
		p.i = f.li + 1
		return n, nil
	case '|', '>':
		return p.blockScalar(li, off, parent)
	case '-':
		if len(s) == 1 || s[1] == ' ' || s[1] == '\t' {
			return node{}, p.errAt(li, off, "a list cannot start on the same line as its key; put each item on a line of its own")
		}
	case '?':
		if len(s) == 1 || s[1] == ' ' || s[1] == '\t' {
			return node{}, p.errAt(li, off, "complex keys (?) are not supported")
		}
	case ':':
		if len(s) == 1 || s[1] == ' ' || s[1] == '\t' {
			return node{}, p.errAt(li, off, "a key is missing before ':'")
		}
	}
	if err := p.badStart(li, off, s[0]); err != nil {
		return node{}, err
	}
	// A plain scalar: up to a comment or the end of the line.
	end := off
	for j := off; j < l.end; j++ {
		c := p.src[j]
		if c == '#' && (p.src[j-1] == ' ' || p.src[j-1] == '\t') {
			break
		}
		if c == ':' && (j+1 == l.end || p.src[j+1] == ' ' || p.src[j+1] == '\t') {
			if afterKey {
				return node{}, p.errAt(li, j, "a plain value cannot contain \": \"; quote the value")
			}
			return node{}, p.errAt(li, j, "a plain value cannot contain \": \"; quote it")
		}
		if c != ' ' && c != '\t' {
			end = j + 1
		}
	}
	p.i = li + 1
	return node{kind: scalarNode, pos: p.pos(li, off), value: p.src[off:end]}, nil
}

// badStart refuses characters a plain scalar cannot start with.
func (p *parser) badStart(li, off int, c byte) error {
	switch c {
	case '&':
		return p.errAt(li, off, "anchors (&) are not supported")
	case '*':
		return p.errAt(li, off, "aliases (*) are not supported")
	case '!':
		return p.errAt(li, off, "tags (!) are not supported")
	case '%', '@', '`', ',', ']', '}', '#', '|', '>':
		return p.errAt(li, off, "a plain value cannot start with %q; quote it", string(c))
	}
	return nil
}

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
	l := &p.lines[li]
	n := node{kind: scalarNode, style: literalStyle, pos: p.pos(li, off)}
	if p.src[off] == '>' {
		n.style = foldedStyle
	}
	chomp := byte(0) // '-' strip, '+' keep, 0 clip
	explicit := 0
	j := off + 1
	for ; j < l.end && j < off+3; j++ {
		c := p.src[j]
		if (c == '-' || c == '+') && chomp == 0 {
			chomp = c
		} else if c >= '1' && c <= '9' && explicit == 0 {
			explicit = int(c - '0')
		} else if c == '0' {
			return node{}, p.errAt(li, j, "a block scalar's indentation indicator is 1 to 9")
		} else {
			break
		}
	}
	if j < l.end && p.src[j] != ' ' && p.src[j] != '\t' {
		return node{}, p.errAt(li, j, "invalid block scalar header: use |, |-, |+, > , >- or >+")
	}
	if err := p.endOfLine(li, j, "after the block scalar header"); err != nil {
		return node{}, err
	}

	// Find the content's indentation.
	var indent int
	if explicit > 0 {
		indent = max(parent, 0) + explicit
	} else {
		// The first line with text sets the indentation; without one, the
		// longest leading empty line does.
		maxEmpty, emptyLine, found := 0, 0, false
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
			return node{}, p.errAt(emptyLine, p.lines[emptyLine].off+indent,
				"a leading empty line of a block scalar has more spaces than its first line")
		case !found:
			indent = max(parent+1, maxEmpty)
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

	// Trailing empty lines are chomped.
	last := len(text)
	for last > 0 && text[last-1] == "" {
		last--
	}
	trailing := len(text) - last
	var b strings.Builder
	if n.style == literalStyle {
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
	n.value = b.String()
	return n, nil
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

// collect returns the items pushed since mark, in a slice of their own,
// and pops them.
func (p *parser) collect(mark int) []node {
	items := make([]node, len(p.stack)-mark)
	copy(items, p.stack[mark:])
	p.stack = p.stack[:mark]
	return items
}

// duplicate returns the line of an earlier key among a mapping's items
// (key, value, key, value...) equal to k, or 0. Small mappings are
// searched; large ones get an index in *seen.
func (p *parser) duplicate(items []node, seen *map[string]int, k *node) int {
	const small = 32
	n := len(items) / 2
	if n < small {
		for i := 0; i < len(items); i += 2 {
			if items[i].value == k.value {
				return items[i].pos.Line
			}
		}
		return 0
	}
	if *seen == nil {
		*seen = make(map[string]int, 2*n)
		for i := 0; i < len(items); i += 2 {
			(*seen)[items[i].value] = items[i].pos.Line
		}
	}
	if line, ok := (*seen)[k.value]; ok {
		return line
	}
	(*seen)[k.value] = k.pos.Line
	return 0
}

// checkPlainKey refuses keys YAML gives a meaning pinfold does not
// support.
func (p *parser) checkPlainKey(li, off int, k string) error {
	if k == "<<" {
		return p.errAt(li, off, "merge keys (<<) are not supported")
	}
	return nil
}
