package config

import (
	"strings"
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
