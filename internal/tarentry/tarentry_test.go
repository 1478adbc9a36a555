package tarentry

import (
	"strings"
	"testing"
)

func TestClean(t *testing.T) {
	for _, c := range []struct {
		in, want string
		err      error
	}{
		{"a/b", "a/b", nil},
		{"./a//b/", "a/b", nil},
		{"/a/../b", "b", nil},
		{".", "", nil},
		{"", "", ErrEmptyName},
		{"a/../../x", "", ErrNameEscapes},
		{"a\x00b", "", ErrNameNUL},
		{strings.Repeat("a", MaxName+1), "", ErrNameTooLong},
	} {
		got, err := Clean(c.in)
		if got != c.want || err != c.err {
			t.Errorf("Clean(%q) = %q, %v; want %q, %v", c.in, got, err, c.want, c.err)
		}
	}
}

func TestQuote(t *testing.T) {
	if got := Quote("a\"b\\c\n\x7f"); got != `"a\"b\\c\x0a\x7f"` {
		t.Errorf("Quote: %s", got)
	}
	if got := Quote(strings.Repeat("x", 300)); len(got) != 205 {
		t.Errorf("Quote of 300 bytes is %d long, want 200 and an ellipsis", len(got))
	}
}
