package changeset

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestScanBasics(t *testing.T) {
	o := newOverlay(t)
	writeFile(t, filepath.Join(o.lower, "keep"), "keep\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "edit"), "one\ntwo\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "gone"), "bye\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "old"), "moved\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "script"), "#!/bin/sh\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "owned"), "x\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "touched"), "same\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "d/a"), "a\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "d/sub/b"), "b\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "r/x"), "x\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "r/y"), "y\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "f2d"), "file\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "d2f/z"), "z\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "hl"), "linked\n", 0o644)
	o.inside(t, `
echo new > added
echo three >> edit
rm gone
mv old renamed
chmod +x script
chown 1234:1234 owned
: >> touched
rm -rf d
rm -rf r && mkdir r && echo y > r/y && echo w > r/w
rm f2d && mkdir f2d && echo in > f2d/in
rm -rf d2f && echo now-a-file > d2f
ln -s edit link
ln hl hl2
mkdir emptydir
: > empty
`)
	got := summary(o.scan(t))
	want := `added added
deleted d/
deleted d/a
deleted d/sub/
deleted d/sub/b
modified d2f (type)
deleted d2f/z
modified edit
added empty
added emptydir/
modified f2d/ (type)
added f2d/in
deleted gone
added hl2
added link
deleted old
modified r/ (opaque)
added r/w
deleted r/x
added renamed
modified script
`
	if got != want {
		t.Errorf("entries:\n%s\nwant:\n%s", got, want)
	}
	if _, err := os.Stat(filepath.Join(o.upper, "owned")); err != nil {
		t.Errorf("chown should have copied the file up: %v", err)
	}
}

func TestScanEdgeCases(t *testing.T) {
	o := newOverlay(t)
	odd := "odd name\n\"q\"\xff"
	writeFile(t, filepath.Join(o.lower, "unchanged"), "same\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "rewritten-same"), "same bytes\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "chowned"), "x\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "big.bin"), strings.Repeat("\x00\x01big", 10<<20/5), 0o644)
	writeFile(t, filepath.Join(o.lower, "was-empty"), "", 0o644)
	writeFile(t, filepath.Join(o.lower, odd), "odd\n", 0o644)
	o.inside(t, `
: >> unchanged
cat rewritten-same > tmp && cat tmp > rewritten-same && rm tmp
chown 4242:4242 chowned
head -c 10485760 /dev/urandom > big.bin
head -c 10485760 /dev/urandom > new-big.bin
: > new-empty
echo x > was-empty
printf 'changed\n' > "$(printf 'odd name\n"q"\377')"
touch "$(printf 'new\tname\\\\ with space \377')"
echo a > h1 && ln h1 h2
`)
	es := o.scan(t)
	got := summary(es)
	want := "modified big.bin\nadded h1\nadded h2\nadded new\tname\\\\ with space \xff\nadded new-big.bin\nadded new-empty\nmodified " + odd + "\nmodified was-empty\n"
	if got != want {
		t.Errorf("entries:\n%q\nwant:\n%q", got, want)
	}
	for _, e := range es {
		if e.Path == "h1" || e.Path == "h2" {
			if e.New.Nlink != 2 {
				t.Errorf("%s: nlink %d", e.Path, e.New.Nlink)
			}
		}
	}
	var b bytes.Buffer
	if err := WriteStat(&b, o.roots(), es, DiffOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), " big.bin                         | Bin 10485760 -> 10485760 bytes\n") {
		t.Errorf("stat:\n%s", b.String())
	}
}

func TestScanMultipleRoots(t *testing.T) {
	a, b := newOverlay(t), newOverlay(t)
	a.inside(t, "echo a > z")
	b.inside(t, "echo b > a")
	es, err := Scan(context.Background(), append(a.roots(), b.roots()...))
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 || es[0].Root != 0 || es[0].Path != "z" || es[1].Root != 1 || es[1].Path != "a" {
		t.Errorf("entries %+v", es)
	}
}

// TestScanTypes: the light scan of a run's end finds the same paths,
// kinds and counts as a full one, new trees included, and stats what
// may be a whiteout.
func TestScanTypes(t *testing.T) {
	o := basicOverlay(t)
	o.inside(t, `mkdir -p big/a/b && for i in 1 2 3; do echo $i > big/f$i; echo $i > big/a/b/g$i; done; ln -s f1 big/l; rm -f big/f3`)
	full := o.scan(t)
	light, err := ScanTypes(context.Background(), o.roots())
	if err != nil {
		t.Fatal(err)
	}
	if len(full) != len(light) || Count(full) != Count(light) {
		t.Fatalf("light scan: %d entries %+v, full: %d %+v", len(light), Count(light), len(full), Count(full))
	}
	for i := range full {
		f, l := full[i], light[i]
		if f.Path != l.Path || f.Kind != l.Kind || f.IsDir() != l.IsDir() || (f.New == nil) != (l.New == nil) ||
			f.New != nil && f.New.Mode.Type() != l.New.Mode.Type() {
			t.Errorf("entry %d: full %s %v %+v, light %s %v %+v", i, f.Path, f.Kind, f.New, l.Path, l.Kind, l.New)
		}
	}
}
