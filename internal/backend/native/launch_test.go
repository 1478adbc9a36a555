package native

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func TestStatDep(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	if d, err := StatDep(DepStat, f); err != nil || d.Kind != DepAbsent {
		t.Fatalf("missing file: %+v %v", d, err)
	}
	if d, err := StatDep(DepStat, filepath.Join(f, "below")); err != nil || d.Kind != DepAbsent {
		t.Fatalf("below a missing file: %+v %v", d, err)
	}
	os.WriteFile(f, []byte("a"), 0o644)
	a, err := StatDep(DepStat, f)
	if err != nil || a.Kind != DepStat {
		t.Fatalf("file: %+v %v", a, err)
	}
	if b, _ := StatDep(DepStat, f); !a.Same(b) {
		t.Error("two reads of an unchanged file differ")
	}
	os.Chmod(f, 0o600)
	if b, _ := StatDep(DepStat, f); a.Same(b) {
		t.Error("a chmod went unnoticed")
	}
	for _, k := range []DepKind{DepStat, DepLstat, DepAttr, DepLattr} {
		gone, _ := StatDep(k, filepath.Join(dir, "gone"))
		again, _ := StatDep(gone.Kind, gone.Path)
		if !gone.Same(again) {
			t.Errorf("kind %d: a missing path reads differently again: %+v %+v", k, gone, again)
		}
	}
	l := filepath.Join(dir, "l")
	os.Symlink("f", l)
	if d, _ := StatDep(DepLink, l); d.Kind != DepLink || d.Target != "f" {
		t.Errorf("link: %+v", d)
	}
	if d, _ := StatDep(DepLstat, l); d.Kind != DepLstat || d.Stat.Mode&0o170000 != 0o120000 {
		t.Errorf("lstat of a link: %+v", d)
	}
}

func TestLaunchKeyAndFile(t *testing.T) {
	k1, err := LaunchKey([]string{"run", "--"}, "/w", []string{"A=1", "", "B=2"})
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := LaunchKey([]string{"run", "--"}, "/w", []string{"A=1", "B=2"})
	k3, _ := LaunchKey([]string{"run", "--"}, "/w", []string{"A=1", "B=3"})
	if string(k1) != string(k2) {
		t.Error("empty environment entries changed the key (launch.c skips them)")
	}
	if LaunchFile("/d", k1) == LaunchFile("/d", k3) {
		t.Error("different environments share a record file")
	}
}

func TestTrimLaunches(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	write := func(i int) {
		p := filepath.Join(dir, strconv.Itoa(i))
		os.WriteFile(p, nil, 0o600)
		os.Chtimes(p, now, now.Add(time.Duration(i)*time.Second))
	}
	for i := 0; i < 8; i++ {
		write(i)
	}
	trimLaunches(dir, 8)
	if ents, _ := os.ReadDir(dir); len(ents) != 8 {
		t.Fatalf("a directory at its bound was trimmed to %d", len(ents))
	}
	write(8)
	trimLaunches(dir, 8)
	ents, _ := os.ReadDir(dir)
	if len(ents) != 6 || ents[0].Name() != "3" {
		t.Errorf("kept %v, want the 6 newest (three quarters of 8)", ents)
	}
	if n := RemoveLaunches(dir); n != 6 {
		t.Errorf("RemoveLaunches removed %d", n)
	}
}
