package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadTokens: a tokens file is read only when it is sound and private
// (fail closed).
func TestReadTokens(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, text string
		mode       os.FileMode
		err        string
	}{
		{"good", "# tenants\nalice 0123456789abcdef0123\n\nbob  fedcba9876543210fedc\n", 0o600, ""},
		{"readable by others", "alice 0123456789abcdef0123\n", 0o644, "readable by others"},
		{"short token", "alice short\n", 0o600, "at least 16"},
		{"bad tenant", "al/ice 0123456789abcdef0123\n", 0o600, "a tenant is"},
		{"one field", "0123456789abcdef0123\n", 0o600, "want TENANT TOKEN"},
		{"token twice", "a 0123456789abcdef0123\nb 0123456789abcdef0123\n", 0o600, "twice"},
		{"empty", "# nothing\n", 0o600, "no token"},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-"))
		os.WriteFile(p, []byte(c.text), c.mode)
		os.Chmod(p, c.mode)
		tokens, err := ReadTokens(p)
		switch {
		case c.err == "" && (err != nil || len(tokens) != 2 || tokens["fedcba9876543210fedc"] != "bob"):
			t.Errorf("%s: %v %v", c.name, tokens, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.err)
		}
	}
	s := &Server{cfg: Config{Tokens: map[string]string{"0123456789abcdef0123": "alice"}}}
	for h, want := range map[string]bool{"Bearer 0123456789abcdef0123": true, "Bearer 0123456789abcdef012": false,
		"bearer 0123456789abcdef0123": false, "Bearer ": false, "": false, "0123456789abcdef0123": false} {
		if tenant, ok := s.token(h); ok != want || ok && tenant != "alice" {
			t.Errorf("Authorization %q: %q %v", h, tenant, ok)
		}
	}
}
