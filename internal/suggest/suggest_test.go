package suggest

import "testing"

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{
		{"", "", 0}, {"network", "network", 0}, {"netwrok", "network", 2}, {"run", "runn", 1},
		{"", "abc", 3}, {"kitten", "sitting", 3}, {string(make([]byte, 65)), "a", 64},
	} {
		if d := Distance(c.a, c.b); d != c.d {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, d, c.d)
		}
	}
}
