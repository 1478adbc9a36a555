package changeset

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// formatOverlays makes two roots with changes of every kind the writers
// show.
func formatOverlays(t *testing.T) ([]Root, []Entry) {
	o := newOverlay(t)
	var lines strings.Builder
	for i := 1; i <= 12; i++ {
		lines.WriteString("line " + strings.Repeat("x", i) + "\n")
	}
	writeFile(t, filepath.Join(o.lower, "edit.txt"), lines.String(), 0o644)
	writeFile(t, filepath.Join(o.lower, "gone.txt"), "one\ntwo\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "mode.sh"), "#!/bin/sh\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "bin.dat"), "\x00\x01\x02", 0o644)
	writeFile(t, filepath.Join(o.lower, "noeol"), "last", 0o644)
	writeFile(t, filepath.Join(o.lower, "tochange"), "file\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "node_modules/pkg/index.js"), "x\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "dir/sub/deleted"), "a\nb\nc\n", 0o644)
	if err := os.Symlink("a", filepath.Join(o.lower, "sym")); err != nil {
		t.Fatal(err)
	}
	o.inside(t, `
sed -i 's/line xxx$/line three/; s/line xxxxxxxxxxx$/line eleven/' edit.txt
echo added > new.txt
rm gone.txt
chmod 755 mode.sh
printf '\000\001\003\004' > bin.dat
printf 'last\n' > noeol
rm tochange && ln -s target tochange
ln -sfn b sym
: > empty
printf 'odd\n' > "$(printf 'odd name\n"q"\377')"
mkdir -p a/very/long/path/that/goes/on/and/on/for/quite/a/while/until/it/is/too/wide
seq 1 150 > a/very/long/path/that/goes/on/and/on/for/quite/a/while/until/it/is/too/wide/numbers
echo changed > node_modules/pkg/index.js
rm -rf dir
head -c 100 /dev/zero > zeros.bin
`)
	o2 := newOverlay(t)
	o2.inside(t, `echo other > other.txt`)
	roots := []Root{o.roots()[0], o2.roots()[0]}
	es, err := Scan(context.Background(), roots)
	if err != nil {
		t.Fatal(err)
	}
	return roots, es
}

func prefix(root int) string {
	if root == 0 {
		return ""
	}
	return "captured/1/"
}

func TestFormatsGolden(t *testing.T) {
	roots, es := formatOverlays(t)
	for _, tc := range []struct {
		name  string
		write func(w *bytes.Buffer, o DiffOptions) error
		o     DiffOptions
	}{
		{"diff", func(w *bytes.Buffer, o DiffOptions) error { return WriteDiff(w, roots, es, o) }, DiffOptions{Prefix: prefix}},
		{"diff-u1", func(w *bytes.Buffer, o DiffOptions) error { return WriteDiff(w, roots, es, o) }, DiffOptions{Prefix: prefix, Context: 1, Paths: []string{"edit.txt"}}},
		{"stat", func(w *bytes.Buffer, o DiffOptions) error { return WriteStat(w, roots, es, o) }, DiffOptions{Prefix: prefix}},
		{"stat-filtered", func(w *bytes.Buffer, o DiffOptions) error { return WriteStat(w, roots, es, o) },
			DiffOptions{Prefix: prefix, Paths: []string{"captured/1", "node_modules", "dir", "edit.txt"}, Exclude: []string{"node_modules/*"}}},
		{"name-status", func(w *bytes.Buffer, o DiffOptions) error { return WriteNameStatus(w, roots, es, o) }, DiffOptions{Prefix: prefix}},
		{"json", func(w *bytes.Buffer, o DiffOptions) error { return WriteJSON(w, roots, es, o) }, DiffOptions{Prefix: prefix}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.write(&b, tc.o); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name+".golden", b.Bytes())
		})
	}
	var b bytes.Buffer
	if err := WriteJSON(&b, roots, es, DiffOptions{}); err != nil {
		t.Fatal(err)
	}
	var list []map[string]any
	if err := json.Unmarshal(b.Bytes(), &list); err != nil {
		t.Fatalf("WriteJSON wrote invalid JSON: %v", err)
	}
	if got := Count(es); got != (Counts{Added: 6, Modified: 7, Deleted: 2}) {
		t.Errorf("Count = %+v", got)
	}
}

// TestDiffRoundTrip applies the patch of every text file back onto the
// original with the test's patcher.
func TestDiffRoundTrip(t *testing.T) {
	roots, es := formatOverlays(t)
	for _, e := range es {
		if e.Kind != Modified || !e.New.Mode.IsRegular() || !e.Old.Mode.IsRegular() || strings.HasSuffix(e.Path, ".dat") {
			continue
		}
		var b bytes.Buffer
		if err := WriteDiff(&b, roots, es, DiffOptions{Paths: []string{e.Path}, Context: 2}); err != nil {
			t.Fatal(err)
		}
		d := b.String()
		if i := strings.Index(d, "@@"); i >= 0 {
			d = d[i:]
		} else {
			continue
		}
		old, _ := os.ReadFile(join(roots[e.Root].Lower, e.Path))
		want, _ := os.ReadFile(join(roots[e.Root].Upper, e.Path))
		got, err := patch(old, d)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: patch: %v; got %q, want %q", e.Path, err, got, want)
		}
	}
}
