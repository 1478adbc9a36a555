package changeset

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
)

// patch applies the hunks of a one-file unified diff (as writeHunks
// writes them) to old.
func patch(old []byte, diff string) ([]byte, error) {
	var t text
	t.split(old)
	type pline struct {
		c    byte
		text string
	}
	var lines []pline
	raw := strings.SplitAfter(diff, "\n")
	for i := 0; i < len(raw); i++ {
		l := raw[i]
		if l == "" {
			continue
		}
		if strings.HasPrefix(l, "\\ No newline at end of file") {
			if len(lines) == 0 {
				return nil, fmt.Errorf("stray no-newline marker")
			}
			lines[len(lines)-1].text = strings.TrimSuffix(lines[len(lines)-1].text, "\n")
			continue
		}
		lines = append(lines, pline{l[0], l[1:]})
	}
	var out []byte
	pos := 0 // next old line
	for k := 0; k < len(lines); {
		h := lines[k]
		if h.c != '@' {
			return nil, fmt.Errorf("line %d: want a hunk header, got %q", k, h.text)
		}
		var as, al, bs, bl int
		hdr := "@" + strings.TrimSuffix(h.text, "\n")
		if err := parseHunk(hdr, &as, &al, &bs, &bl); err != nil {
			return nil, err
		}
		start := as - 1
		if al == 0 {
			start = as
		}
		if start < pos || start > t.n() {
			return nil, fmt.Errorf("hunk %q starts at %d, at %d", hdr, start, pos)
		}
		for ; pos < start; pos++ {
			out = append(out, t.line(pos)...)
		}
		if len(out) != 0 && countLines(out) != bs-1 && bl != 0 {
			return nil, fmt.Errorf("hunk %q: new text at line %d", hdr, countLines(out)+1)
		}
		k++
		na, nb := 0, 0
		for ; k < len(lines) && lines[k].c != '@'; k++ {
			l := lines[k]
			switch l.c {
			case ' ', '-':
				if pos >= t.n() || string(t.line(pos)) != l.text {
					return nil, fmt.Errorf("hunk %q: old line %d is %q, the diff says %q", hdr, pos+1, t.line(min(pos, t.n()-1)), l.text)
				}
				pos++
				na++
				if l.c == ' ' {
					out = append(out, l.text...)
					nb++
				}
			case '+':
				out = append(out, l.text...)
				nb++
			default:
				return nil, fmt.Errorf("bad line %q", l.text)
			}
		}
		if na != al || nb != bl {
			return nil, fmt.Errorf("hunk %q has %d old and %d new lines", hdr, na, nb)
		}
	}
	for ; pos < t.n(); pos++ {
		out = append(out, t.line(pos)...)
	}
	return out, nil
}

func parseHunk(h string, as, al, bs, bl *int) error {
	f := strings.Fields(h)
	if len(f) != 4 || f[0] != "@@" || f[3] != "@@" || f[1][0] != '-' || f[2][0] != '+' {
		return fmt.Errorf("bad hunk header %q", h)
	}
	rng := func(s string, start, n *int) error {
		a, b, ok := strings.Cut(s, ",")
		var err error
		if *start, err = strconv.Atoi(a); err != nil {
			return err
		}
		*n = 1
		if ok {
			*n, err = strconv.Atoi(b)
		}
		return err
	}
	if err := rng(f[1][1:], as, al); err != nil {
		return err
	}
	return rng(f[2][1:], bs, bl)
}

// unified diffs a and b as the writers do, hunks only.
func unified(d *differ, a, b []byte, context int) (string, int, int) {
	edits := d.diff(a, b, nil)
	var w bytes.Buffer
	writeHunks(&w, &d.a, &d.b, edits, context)
	ins, del := 0, 0
	for _, e := range edits {
		ins += e.j1 - e.j0
		del += e.i1 - e.i0
	}
	return w.String(), ins, del
}

func checkRoundTrip(t *testing.T, d *differ, a, b []byte, context int) (int, int) {
	t.Helper()
	u, ins, del := unified(d, a, b, context)
	got, err := patch(a, u)
	if err != nil {
		t.Fatalf("patch: %v\nold %q\nnew %q\ndiff:\n%s", err, a, b, u)
	}
	if !bytes.Equal(got, b) {
		t.Fatalf("patched old is %q, want %q\ndiff:\n%s", got, b, u)
	}
	return ins, del
}

func TestDiffHunks(t *testing.T) {
	for _, tc := range []struct {
		name, a, b, want string
	}{
		{"same", "a\nb\n", "a\nb\n", ""},
		{"append", "a\n", "a\nb\n", "@@ -1 +1,2 @@\n a\n+b\n"},
		{"new", "", "a\nb\n", "@@ -0,0 +1,2 @@\n+a\n+b\n"},
		{"all gone", "a\nb\n", "", "@@ -1,2 +0,0 @@\n-a\n-b\n"},
		{"no newline added", "a", "a\n", "@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+a\n"},
		{"no newline kept", "a\nb", "x\nb", "@@ -1,2 +1,2 @@\n-a\n+x\n b\n\\ No newline at end of file\n"},
		{"insert in middle", "1\n2\n3\n4\n5\n6\n7\n8\n9\n", "1\n2\n3\n4\nX\n5\n6\n7\n8\n9\n",
			"@@ -2,6 +2,7 @@\n 2\n 3\n 4\n+X\n 5\n 6\n 7\n"},
		{"delete at start", "1\n2\n3\n4\n5\n", "2\n3\n4\n5\n", "@@ -1,4 +1,3 @@\n-1\n 2\n 3\n 4\n"},
		{"two hunks", "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n", "x\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\ny\n",
			"@@ -1,4 +1,4 @@\n-1\n+x\n 2\n 3\n 4\n@@ -9,4 +9,4 @@\n 9\n 10\n 11\n-12\n+y\n"},
		{"merged hunks", "1\n2\n3\n4\n5\n6\n7\n8\n", "x\n2\n3\n4\n5\n6\n7\ny\n",
			"@@ -1,8 +1,8 @@\n-1\n+x\n 2\n 3\n 4\n 5\n 6\n 7\n-8\n+y\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d differ
			got, _, _ := unified(&d, []byte(tc.a), []byte(tc.b), 3)
			if got != tc.want {
				t.Errorf("diff:\n%s\nwant:\n%s", got, tc.want)
			}
			checkRoundTrip(t, &d, []byte(tc.a), []byte(tc.b), 3)
		})
	}
}

// TestDiffMinimal checks the edit counts against a plain LCS on random
// small texts.
func TestDiffMinimal(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var d differ
	for range 2000 {
		a, b := randomText(r, 30, 4), randomText(r, 30, 4)
		ins, del := checkRoundTrip(t, &d, a, b, r.IntN(4))
		var ta, tb text
		ta.split(a)
		tb.split(b)
		l := lcs(&ta, &tb)
		if ins != tb.n()-l || del != ta.n()-l {
			t.Fatalf("%q -> %q: +%d -%d, a shortest script has +%d -%d", a, b, ins, del, tb.n()-l, ta.n()-l)
		}
	}
}

func lcs(a, b *text) int {
	n, m := a.n(), b.n()
	prev, cur := make([]int, m+1), make([]int, m+1)
	for i := 1; i <= n; i++ {
		for j := 1; j <= m; j++ {
			switch {
			case bytes.Equal(a.line(i-1), b.line(j-1)):
				cur[j] = prev[j-1] + 1
			default:
				cur[j] = max(prev[j], cur[j-1])
			}
		}
		prev, cur = cur, prev
	}
	return prev[m]
}

func randomText(r *rand.Rand, lines, alphabet int) []byte {
	var b []byte
	n := r.IntN(lines)
	for range n {
		b = append(b, byte('a'+r.IntN(alphabet)))
		if r.IntN(3) == 0 {
			b = append(b, byte('a'+r.IntN(alphabet)))
		}
		b = append(b, '\n')
	}
	if len(b) > 0 && r.IntN(4) == 0 {
		b = b[:len(b)-1]
	}
	return b
}

// TestDiffPathological: two large unrelated texts stay fast (the search
// bails out) and the diff still applies.
func TestDiffPathological(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var a, b []byte
	for range 200000 {
		a = append(a, strconv.Itoa(r.IntN(1000))+"\n"...)
		b = append(b, strconv.Itoa(r.IntN(1000))+"\n"...)
	}
	var d differ
	start := time.Now()
	checkRoundTrip(t, &d, a, b, 3)
	if el := time.Since(start); el > 20*time.Second {
		t.Errorf("diff of two 200,000-line texts took %v", el)
	}
	// A tiny search limit forces the heuristic split on small inputs too.
	for range 500 {
		d := differ{limit: 1 + r.IntN(3)}
		checkRoundTrip(t, &d, randomText(r, 60, 3), randomText(r, 60, 3), 2)
	}
}

func FuzzDiff(f *testing.F) {
	f.Add([]byte("a\nb\nc\n"), []byte("a\nc\nd"), uint8(3), uint8(0))
	f.Add([]byte(""), []byte("x"), uint8(0), uint8(1))
	f.Add([]byte("1\n2\n3\n4\n5\n6\n7\n8\n9\n"), []byte("1\n2\nX\n4\n5\n6\n7\nY\n9\n"), uint8(1), uint8(2))
	f.Fuzz(func(t *testing.T, a, b []byte, context, limit uint8) {
		d := differ{limit: int(limit % 8)}
		checkRoundTrip(t, &d, a, b, int(context%6))
	})
}

func TestQuotePath(t *testing.T) {
	for in, want := range map[string]string{
		"plain/name.txt": "plain/name.txt",
		"with space":     "with space",
		"new\nline":      `"new\nline"`,
		`quo"te`:         `"quo\"te"`,
		`back\slash`:     `"back\\slash"`,
		"tab\there":      `"tab\there"`,
		"bad\xffbyte":    `"bad\377byte"`,
		"café":           `"caf\303\251"`,
		"del\x7f":        `"del\177"`,
		"bell\a":         `"bell\a"`,
	} {
		if got := quotePath(in); got != want {
			t.Errorf("quotePath(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestGlob(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"node_modules/*", "node_modules/a/b.js", true},
		{"node_modules/*", "src/node_modules/a", false},
		{"*/node_modules/*", "src/node_modules/a", true},
		{"*.log", "a/b/c.log", true},
		{"*.log", "a.log.txt", false},
		{"a?c", "abc", true},
		{"a?c", "a/c", true},
		{"[ab]x", "bx", true},
		{"[!ab]x", "bx", false},
		{"[a-c]x", "cx", true},
		{`\*`, "*", true},
		{`\*`, "a", false},
		{"", "", true},
		{"*", "", true},
		{"a*b*c", "a/x/b/y/c", true},
		{"a*b*c", "a/x/b/y/d", false},
	} {
		if got := globMatch(tc.pattern, tc.name); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v", tc.pattern, tc.name, got)
		}
	}
	if !excluded("build", "build/out/x") || excluded("build", "builder") {
		t.Error("a pattern should exclude a directory's contents and nothing else")
	}
}
