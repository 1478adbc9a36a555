package config

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"unicode/utf8"
)

func BenchmarkLoad200(b *testing.B) {
	data, err := os.ReadFile("testdata/monorepo.yaml")
	if err != nil {
		b.Fatal(err)
	}
	if n := bytes.Count(data, []byte("\n")); n < 200 {
		b.Fatalf("testdata/monorepo.yaml has %d lines; the benchmark wants 200", n)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Parse("/work/monorepo/pinfold.yaml", data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseYAML200(b *testing.B) {
	data, err := os.ReadFile("testdata/monorepo.yaml")
	if err != nil {
		b.Fatal(err)
	}
	src := string(data)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := parseYAML("pinfold.yaml", src); err != nil {
			b.Fatal(err)
		}
	}
}

func TestMonorepoLoads(t *testing.T) {
	data, err := os.ReadFile("testdata/monorepo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse("pinfold.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Profiles) != 8 || len(f.Dispatch) != 18 || len(f.Settings.Env.SetOrder) != 8 {
		t.Errorf("profiles %d, rules %d, env.set %d", len(f.Profiles), len(f.Dispatch), len(f.Settings.Env.SetOrder))
	}
}

// emit prints a node tree as block YAML, every scalar double-quoted, so
// that parsing it again must give the same tree.
func emit(b *strings.Builder, n *node, indent int) {
	pad := strings.Repeat(" ", indent)
	// inline writes what follows "key:" or "-" on the same line, and
	// reports whether a nested block follows.
	inline := func(v *node) bool {
		switch {
		case v.null:
		case v.kind == scalarNode:
			b.WriteByte(' ')
			quote(b, v.value)
		case len(v.items) == 0 && v.kind == mapNode:
			b.WriteString(" {}")
		case len(v.items) == 0:
			b.WriteString(" []")
		default:
			return true
		}
		return false
	}
	if indent == 0 && !n.null && n.kind != scalarNode && len(n.items) == 0 {
		inline(n) // an empty collection at the root
		b.WriteByte('\n')
		return
	}
	switch n.kind {
	case mapNode:
		for i := 0; i < len(n.items); i += 2 {
			b.WriteString(pad)
			quote(b, n.items[i].value)
			b.WriteByte(':')
			nested := inline(&n.items[i+1])
			b.WriteByte('\n')
			if nested {
				emit(b, &n.items[i+1], indent+2)
			}
		}
	case seqNode:
		for i := range n.items {
			b.WriteString(pad)
			b.WriteByte('-')
			nested := inline(&n.items[i])
			b.WriteByte('\n')
			if nested {
				emit(b, &n.items[i], indent+2)
			}
		}
	default:
		if !n.null {
			quote(b, n.value)
			b.WriteByte('\n')
		}
	}
}

func quote(b *strings.Builder, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f || r == 0xfeff || r == utf8.RuneError:
			b.WriteString(`\u`)
			for shift := 12; shift >= 0; shift -= 4 {
				b.WriteByte(hex[r>>shift&0xf])
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}

func FuzzParse(f *testing.F) {
	for _, name := range Templates() {
		data, _ := Template(name)
		f.Add(data)
	}
	if data, err := os.ReadFile("testdata/monorepo.yaml"); err == nil {
		f.Add(data)
	}
	f.Add([]byte(everyKey))
	for _, s := range []string{
		"", "a: [x, {b: c}]\n", "- - a\n  - b\n", "a: |+\n  x\n\n", "a: >-\n  b\n   c\n\n  d\n",
		"a: \"\\u00e9\\x41\"\n", "'a''b': c\n", "---\na: 1\n...\n", "a:\n- b\n- c: d\n  e: f\n",
		"a: {b: [1, 2,\n  3]}\n", "\t- a\n", "a: &x b\n", "a: b: c\n", "é: \"\xff\"\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		src := string(data)
		file, err := Parse("f.yaml", data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			checkPos(t, src, e)
			_ = e.Error()
		} else if file.Version != Version {
			t.Fatalf("loaded version %d", file.Version)
		}

		n, err := parseYAML("f.yaml", src)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			checkPos(t, src, e)
			return
		}
		var b strings.Builder
		emit(&b, &n, 0)
		n2, err := parseYAML("f.yaml", b.String())
		if err != nil {
			t.Fatalf("re-parsing\n%s\nfailed: %v", b.String(), err)
		}
		if d1, d2 := dump(&n), dump(&n2); d1 != d2 {
			t.Fatalf("round trip changed the tree:\n%s\n%s\nprinted as\n%s", d1, d2, b.String())
		}
	})
}

// checkPos wants an error's position inside src: an existing line (or
// line 1 of an empty file) and a column at most one past its end.
func checkPos(t *testing.T, src string, e *Error) {
	t.Helper()
	lines := strings.Split(src, "\n")
	if e.Pos.Line < 1 || e.Pos.Line > len(lines) {
		t.Fatalf("error at line %d of %d: %v", e.Pos.Line, len(lines), e)
	}
	line := strings.TrimSuffix(lines[e.Pos.Line-1], "\r")
	if e.Pos.Line == 1 {
		line = strings.TrimPrefix(line, "\uFEFF") // a leading BOM is not a column
	}
	if n := utf8.RuneCountInString(line); e.Pos.Col < 1 || e.Pos.Col > n+2 {
		t.Fatalf("error at column %d of a line of %d characters: %v", e.Pos.Col, n, e)
	}
}
