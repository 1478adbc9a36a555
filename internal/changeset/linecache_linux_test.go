package changeset

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStatLineCache checks that a second --stat answers from the cache and
// that a file written since is counted again.
func TestStatLineCache(t *testing.T) {
	o := newOverlay(t)
	o.inside(t, "printf 'a\\nb\\nc\\n' > three && printf 'x\\n' > one && head -c 3000 /dev/zero > zeros")
	stat := func() string {
		es, err := Scan(context.Background(), o.roots())
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := WriteStat(&b, o.roots(), es, DiffOptions{}); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	first := stat()
	cache := lineCachePath(o.roots()[0])
	if fi, err := os.Stat(cache); err != nil || fi.Size() == 0 {
		t.Fatalf("no cache after --stat: %v", err)
	}
	// A cache that claims other counts proves the second run reads it.
	m := loadLineCache(o.roots()[0])
	v := m["three"]
	v.ins = 7
	m["three"] = v
	saveLineCache(o.roots()[0], m)
	if second := stat(); second == first || count(second, "three") != "7" {
		t.Errorf("second --stat did not use the cache:\n%s", second)
	}
	// Writing the file again makes the cache entry stale.
	o.inside(t, "printf 'a\\nb\\nc\\nd\\n' > three")
	if third := stat(); count(third, "three") != "4" {
		t.Errorf("a rewritten file kept its cached count:\n%s", third)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(o.upper), "lines.cache.tmp")); err == nil {
		t.Error("temporary file left behind")
	}
}

// count returns the number on name's --stat line.
func count(stat, name string) string {
	for _, line := range strings.Split(stat, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == name && f[1] == "|" {
			return f[2]
		}
	}
	return ""
}
