package config

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// dump renders a node tree compactly: {k: v}, [a, b], "scalar", null.
func dump(n *node) string {
	var b strings.Builder
	var walk func(n *node)
	walk = func(n *node) {
		switch {
		case n.null:
			b.WriteString("null")
		case n.kind == scalarNode:
			b.WriteString(strconv.Quote(n.value))
		case n.kind == seqNode:
			b.WriteByte('[')
			for i := range n.items {
				if i > 0 {
					b.WriteString(", ")
				}
				walk(&n.items[i])
			}
			b.WriteByte(']')
		case n.kind == mapNode:
			b.WriteByte('{')
			for i := 0; i < len(n.items); i += 2 {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString(n.items[i].value)
				b.WriteString(": ")
				walk(&n.items[i+1])
			}
			b.WriteByte('}')
		}
	}
	walk(n)
	return b.String()
}

func TestYAMLSubset(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
	}{
		{"empty", "", "null"},
		{"only comments", "# a\n\n   # b\n", "null"},
		{"document start", "---\na: 1\n", `{a: "1"}`},
		{"document start with comment", "--- # hi\na: 1\n", `{a: "1"}`},
		{"document end", "a: 1\n...\n# trailing\n", `{a: "1"}`},
		{"both markers", "---\na: 1\n...\n", `{a: "1"}`},
		{"no final newline", "a: b", `{a: "b"}`},
		{"crlf", "a: b\r\nc:\r\n  - d\r\n", `{a: "b", c: ["d"]}`},
		{"bom", "\uFEFFa: b\n", `{a: "b"}`},
		{"block mapping", "a: 1\nb: two words\nc: x\n", `{a: "1", b: "two words", c: "x"}`},
		{"nested mapping", "a:\n  b:\n    c: d\n  e: f\ng: h\n", `{a: {b: {c: "d"}, e: "f"}, g: "h"}`},
		{"sequence", "a:\n  - x\n  - y\n", `{a: ["x", "y"]}`},
		{"compact sequence", "a:\n- x\n- y\nb: z\n", `{a: ["x", "y"], b: "z"}`},
		{"sequence of mappings", "a:\n  - name: n\n    path: /p\n  - name: m\n", `{a: [{name: "n", path: "/p"}, {name: "m"}]}`},
		{"sequence of mappings wide", "a:\n  -   name: n\n      path: /p\n", `{a: [{name: "n", path: "/p"}]}`},
		{"nested sequences", "- - a\n  - b\n- c\n", `[["a", "b"], "c"]`},
		{"item on next line", "-\n  a: b\n", `[{a: "b"}]`},
		{"null item", "- \n- a\n", `[null, "a"]`},
		{"null value", "a:\nb: 1\n", `{a: null, b: "1"}`},
		{"null at end", "a:", `{a: null}`},
		{"root sequence", "- a\n- b\n", `["a", "b"]`},
		{"root scalar", "hello\n", `"hello"`},
		{"indented root", "  a: 1\n  b: 2\n", `{a: "1", b: "2"}`},
		{"plain scalars stay strings", "a: no\nb: on\nc: 1.0\nd: 0x10\ne: ~\nf: null\n", `{a: "no", b: "on", c: "1.0", d: "0x10", e: "~", f: "null"}`},
		{"plain with colon and hash", "a: http://x:8080/p#frag\nb: a:b\n", `{a: "http://x:8080/p#frag", b: "a:b"}`},
		{"comments", "# head\na: 1 # one\n# mid\nb: '#not' # two\nc: x#y\n", `{a: "1", b: "#not", c: "x#y"}`},
		{"trailing spaces", "a: b   \n", `{a: "b"}`},
		{"tab after colon", "a:\tb\n", `{a: "b"}`},
		{"key with spaces", "a b: c\n", `{a b: "c"}`},
		{"quoted keys", "\"a b\": 1\n'c:d': 2\n", `{a b: "1", c:d: "2"}`},
		{"single quotes", "a: 'it''s # here'\n", `{a: "it's # here"}`},
		{"double quote escapes", `a: "x\n\t\"\\ \u00e9 \x41 \U0001F600 \/ \0 \e"` + "\n", `{a: "x\n\t\"\\ é A 😀 / \x00 \x1b"}`},
		{"empty quotes", "a: \"\"\nb: ''\n", `{a: "", b: ""}`},
		{"flow sequence", "a: [x, \"b c\", 'd', 1]\n", `{a: ["x", "b c", "d", "1"]}`},
		{"flow sequence empty", "a: []\n", `{a: []}`},
		{"flow sequence trailing comma", "a: [x, y,]\n", `{a: ["x", "y"]}`},
		{"flow mapping", "a: {b: 1, c: x y}\n", `{a: {b: "1", c: "x y"}}`},
		{"flow mapping empty", "a: {}\n", `{a: {}}`},
		{"flow mapping null value", "a: {b: , c: d}\n", `{a: {b: null, c: "d"}}`},
		{"flow nested", "a: [{n: x, p: /y}, [1, 2]]\n", `{a: [{n: "x", p: "/y"}, ["1", "2"]]}`},
		{"flow over lines", "a: [x,\n  y, # c\n  z]\nb: 1\n", `{a: ["x", "y", "z"], b: "1"}`},
		{"flow in sequence", "- [a, b]\n- {c: d}\n", `[["a", "b"], {c: "d"}]`},
		{"flow plain with colon", "a: [http://x:1/, a:b]\n", `{a: ["http://x:1/", "a:b"]}`},
		{"flow on its own line", "a:\n  [x, y]\n", `{a: ["x", "y"]}`},
		{"scalar on its own line", "a:\n  value here\n", `{a: "value here"}`},
		{"literal", "a: |\n  one\n  two\n\n  three\nb: x\n", `{a: "one\ntwo\n\nthree\n", b: "x"}`},
		{"literal strip", "a: |-\n  one\n  two\n\n\nb: x\n", `{a: "one\ntwo", b: "x"}`},
		{"literal keep", "a: |+\n  one\n\n\nb: x\n", `{a: "one\n\n\n", b: "x"}`},
		{"literal keeps indentation", "a: |\n  if x:\n    y\n  # not a comment\n", `{a: "if x:\n  y\n# not a comment\n"}`},
		{"literal at end of file", "a: |\n  one", `{a: "one\n"}`},
		{"literal empty", "a: |\nb: x\n", `{a: "", b: "x"}`},
		{"literal with comment header", "a: | # note\n  x\n", `{a: "x\n"}`},
		{"literal explicit indent", "a: |2\n    x\n  y\n", `{a: "  x\ny\n"}`},
		{"literal leading empty line", "a: |\n\n  x\n", `{a: "\nx\n"}`},
		{"literal in sequence", "- |\n  x\n  y\n- z\n", `["x\ny\n", "z"]`},
		{"literal in item mapping", "- a: |\n    x\n  b: y\n", `[{a: "x\n", b: "y"}]`},
		{"folded", "a: >\n  one\n  two\n\n  three\n", `{a: "one two\nthree\n"}`},
		{"folded strip", "a: >-\n  one\n  two\n", `{a: "one two"}`},
		{"folded more indented", "a: >\n  one\n    code\n  two\n", `{a: "one\n  code\ntwo\n"}`},
		{"folded two empty lines", "a: >\n  one\n\n\n  two\n", `{a: "one\n\ntwo\n"}`},
		{"deep", "a:\n  b:\n    - c:\n        - d: e\n", `{a: {b: [{c: [{d: "e"}]}]}}`},
		{"unicode", "a: héllo wörld\nb: \"ü\"\n", `{a: "héllo wörld", b: "ü"}`},
		{"tab in blank line", "a: 1\n\t\nb: 2\n", `{a: "1", b: "2"}`},
		{"tab before comment", "a: 1\n\t# c\nb: 2\n", `{a: "1", b: "2"}`},
		{"marker-like plain", "a: ---x\nb: ...\n", `{a: "---x", b: "..."}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, err := parseYAML("t.yaml", c.in)
			if err != nil {
				t.Fatalf("parse %q: %v", c.in, err)
			}
			if got := dump(&n); got != c.want {
				t.Errorf("parse %q\n got %s\nwant %s", c.in, got, c.want)
			}
		})
	}
}

func TestYAMLRefusals(t *testing.T) {
	for _, c := range []struct {
		name, in  string
		line, col int
		msg       string
	}{
		{"tab indentation", "a:\n\tb: 1\n", 2, 1, "tabs are not allowed for indentation"},
		{"tab after spaces", "a:\n  \tb: 1\n", 2, 3, "tabs are not allowed for indentation"},
		{"tab after dash", "a:\n  -\tb\n", 2, 4, "tabs are not allowed for indentation"},
		{"anchor", "a: &x 1\n", 1, 4, "anchors (&) are not supported"},
		{"alias", "a: *x\n", 1, 4, "aliases (*) are not supported"},
		{"anchor key", "&a b: 1\n", 1, 1, "anchors (&) are not supported"},
		{"tag", "a: !!str 1\n", 1, 4, "tags (!) are not supported"},
		{"tag in flow", "a: [x, !t y]\n", 1, 8, "tags (!) are not supported"},
		{"alias in sequence", "- *x\n", 1, 3, "aliases (*) are not supported"},
		{"merge key", "a:\n  <<: {b: 1}\n", 2, 3, "merge keys (<<) are not supported"},
		{"merge key in flow", "a: {<<: x}\n", 1, 5, "merge keys (<<) are not supported"},
		{"second document", "a: 1\n---\nb: 2\n", 2, 1, "multiple documents are not supported"},
		{"document after end", "a: 1\n...\n---\nb: 2\n", 3, 1, "multiple documents are not supported"},
		{"content after end", "a: 1\n...\nb: 2\n", 3, 1, "content after the end of the document"},
		{"content after start marker", "--- a: 1\n", 1, 5, "unexpected text after ---"},
		{"duplicate key", "a: 1\nb: 2\na: 3\n", 3, 1, `duplicate key "a" (first at line 1)`},
		{"duplicate nested key", "x:\n  a: 1\n  a: 2\n", 3, 3, `duplicate key "a" (first at line 2)`},
		{"duplicate flow key", "x: {a: 1, a: 2}\n", 1, 11, `duplicate key "a" (first at line 1)`},
		{"duplicate quoted key", "a: 1\n\"a\": 2\n", 2, 1, `duplicate key "a"`},
		{"over-indented key", "a: 1\n  b: 2\n", 2, 3, "inconsistent indentation: this line starts at column 3, but the keys of its mapping start at column 1 (line 1)"},
		{"under-indented key", "a:\n    b: 1\n  c: 2\n", 3, 3, "inconsistent indentation: this line starts at column 3, but the keys of its mapping start at column 1"},
		{"plain continued", "a: one\n  two\n", 2, 3, "a value that goes on over several lines must be quoted"},
		{"over-indented item", "a:\n  - x\n    - y\n", 3, 5, "the items of its list start at column 3"},
		{"key among items", "- a\nb: 1\n", 2, 1, "expected a list item (- ...) like line 1"},
		{"item among keys", "a: 1\n- b\n", 2, 1, "expected a key (KEY: VALUE) like line 1, found a list item"},
		{"scalar among keys", "a: 1\nb\n", 2, 1, "expected a key (KEY: VALUE) like line 1"},
		{"list on key line", "a: - x\n", 1, 4, "a list cannot start on the same line as its key"},
		{"mapping in plain value", "a: b: c\n", 1, 5, `a plain value cannot contain ": "`},
		{"plain value ending in colon", "a: b:\n", 1, 5, `a plain value cannot contain ": "`},
		{"complex key", "? a\n: b\n", 1, 1, "complex keys (?) are not supported"},
		{"missing key", ": b\n", 1, 1, "a key is missing before ':'"},
		{"reserved start", "a: @x\n", 1, 4, `a plain value cannot start with "@"`},
		{"directive", "%YAML 1.2\n---\na: 1\n", 1, 1, `a plain value cannot start with "%"`},
		{"unterminated double", "a: \"abc\n", 1, 4, "unterminated quoted string"},
		{"unterminated single", "a: 'abc\n", 1, 4, "unterminated quoted string"},
		{"multi-line double", "a: \"abc\n  def\"\n", 1, 4, "unterminated quoted string"},
		{"bad escape", `a: "x\q"` + "\n", 1, 6, `unknown escape \q`},
		{"short escape", `a: "\u12"` + "\n", 1, 5, `escape \u needs 4 hex digits`},
		{"surrogate escape", `a: "\ud800"` + "\n", 1, 5, `is not a valid character`},
		{"text after quote", "a: \"x\" y\n", 1, 8, "unexpected text after the quoted value"},
		{"hash after quote", "a: \"x\"#c\n", 1, 7, "unexpected text after the quoted value"},
		{"unterminated flow", "a: [x, y\n", 1, 9, "unterminated [ (opened at line 1, column 4)"},
		{"unterminated flow map", "a: {x: 1\nb: 2\n", 2, 1, "must be indented more than its key"},
		{"flow missing comma", "a: [x y, {b: 1} c]\n", 1, 17, "expected , or ] in the list opened at line 1"},
		{"flow empty entry", "a: [x, , y]\n", 1, 8, "an empty entry in a [ ] list"},
		{"flow pair in seq", "a: [x: 1]\n", 1, 6, "key: value pairs inside [ ] are not supported"},
		{"flow map without colon", "a: {x}\n", 1, 6, `expected ':' after the key "x"`},
		{"flow map no space", "a: {x:1}\n", 1, 8, `expected ':' after the key "x:1"`},
		{"flow collection key", "a: {[x]: 1}\n", 1, 5, "a [ ] or { } collection cannot be a key"},
		{"text after flow", "a: [x] y\n", 1, 8, "unexpected text after the [ ] list"},
		{"text after flow map", "a: {x: 1} y\n", 1, 11, "unexpected text after the { } mapping"},
		{"root scalar continued", "hello\n  world\n", 2, 3, "unexpected indentation: a value that goes on over several lines"},
		{"root dedented", "  a: 1\nb: 2\n", 2, 1, "inconsistent indentation: this line is indented less than the first line"},
		{"bom inside", "a: \uFEFFb\n", 1, 4, "a byte order mark (U+FEFF) is only allowed at the start"},
		{"nested too deeply", strings.Repeat("- ", 70) + "x\n", 1, 129, "collections are nested too deeply"},
		{"flow nested too deeply", "a: " + strings.Repeat("[", 70) + "\n", 1, 68, "collections are nested too deeply"},
		{"block scalar in flow", "a: [|]\n", 1, 5, "block scalars (| and >) cannot be inside"},
		{"bad block header", "a: |x\n  y\n", 1, 5, "invalid block scalar header"},
		{"zero indent indicator", "a: |0\n  y\n", 1, 5, "indentation indicator is 1 to 9"},
		{"leading empty line too long", "a: |\n      \n  x\n", 2, 3, "a leading empty line of a block scalar has more spaces"},
		{"control character", "a: b\x01c\n", 1, 5, "control character U+0001 is not allowed"},
		{"lone carriage return", "a: b\rc: d\n", 1, 5, "a lone carriage return"},
		{"invalid utf8", "a: \xff\n", 1, 4, "invalid UTF-8"},
		{"C1 control", "a: \u0085x\u0090\n", 1, 6, "control character U+0090 is not allowed"},
		{"column counts characters", "a: \"ééé\\q\"\n", 1, 8, `unknown escape \q`},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, err := parseYAML("t.yaml", c.in)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("parse %q = %s, %v; want an *Error", c.in, dump(&n), err)
			}
			if e.Pos != (Pos{c.line, c.col}) || !strings.Contains(e.Msg, c.msg) {
				t.Errorf("parse %q:\n got %d:%d: %s\nwant %d:%d: ...%s...", c.in, e.Pos.Line, e.Pos.Col, e.Msg, c.line, c.col, c.msg)
			}
		})
	}
}

func TestYAMLStylesAndPositions(t *testing.T) {
	src := "a: plain\nb: 'single'\nc: \"double\"\nd: |\n  lit\ne: >\n  fold\nf:\n  - x\n  - {k: v}\n"
	n, err := parseYAML("t.yaml", src)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		key   string
		style style
		pos   Pos
	}{
		{"a", plainStyle, Pos{1, 4}}, {"b", singleStyle, Pos{2, 4}}, {"c", doubleStyle, Pos{3, 4}},
		{"d", literalStyle, Pos{4, 4}}, {"e", foldedStyle, Pos{6, 4}},
	}
	for i, w := range want {
		k, v := n.items[2*i], n.items[2*i+1]
		if k.value != w.key || k.pos != (Pos{w.pos.Line, 1}) || v.style != w.style || v.pos != w.pos {
			t.Errorf("%s: key %q at %v, value style %d at %v; want style %d at %v", w.key, k.value, k.pos, v.style, v.pos, w.style, w.pos)
		}
	}
	f := n.items[11]
	if f.kind != seqNode || f.pos != (Pos{9, 3}) || f.items[0].pos != (Pos{9, 5}) || f.items[1].pos != (Pos{10, 5}) ||
		!f.items[1].flow || f.items[1].items[1].pos != (Pos{10, 9}) {
		t.Errorf("sequence positions: %+v", f)
	}
}

func TestYAMLErrorsCarryLine(t *testing.T) {
	_, err := parseYAML("p.yaml", "a: 1\nb:\n  c: [x,\n  y: 2\n")
	var e *Error
	if !errors.As(err, &e) {
		t.Fatal(err)
	}
	if e.Path != "p.yaml" || e.Line != "  y: 2" {
		t.Errorf("error %+v", e)
	}
}
