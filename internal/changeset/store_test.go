package changeset

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestStore(t *testing.T) {
	store := t.TempDir()
	ws := t.TempDir()
	if _, err := List(store); err != nil {
		t.Fatalf("List of an empty store: %v", err)
	}
	a, err := Create(store, ws, nil, []string{"make", "test"})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Meta.ID) != idLen || a.Meta.Status != StatusRunning || len(a.Roots()) != 1 || a.Roots()[0].Lower != ws {
		t.Fatalf("created %+v", a.Meta)
	}
	for _, d := range []string{"r0/upper", "r0/work"} {
		fi, err := os.Stat(filepath.Join(a.Dir, d))
		if err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v", d, fi, err)
		}
	}
	time.Sleep(10 * time.Millisecond)
	b, err := Create(store, ws, []string{ws, "/other"}, []string{"npm", "install"})
	if err != nil {
		t.Fatal(err)
	}
	if r := b.Roots(); len(r) != 2 || r[1].Lower != "/other" || !strings.HasSuffix(r[1].Upper, "r1/upper") {
		t.Errorf("roots %+v", r)
	}
	// Latest wants an open one.
	if _, err := Latest(store, ws); !errors.Is(err, ErrNotFound) {
		t.Errorf("Latest with none open: %v", err)
	}
	a.Meta.Status, a.Meta.Finished = StatusOpen, time.Now()
	if err := a.Save(); err != nil {
		t.Fatal(err)
	}
	if err := a.SaveFingerprints(Fingerprints{FingerprintKey(0, "bad\xffname"): {Size: 3}, FingerprintKey(1, "x"): {Absent: true}}); err != nil {
		t.Fatal(err)
	}
	l, err := Latest(store, ws)
	if err != nil || l.Meta.ID != a.Meta.ID {
		t.Fatalf("Latest = %v, %v; want %s", l, err, a.Meta.ID)
	}
	fp, err := l.Fingerprints()
	if got := fp[FingerprintKey(0, "bad\xffname")]; err != nil || got.Size != 3 || len(fp) != 2 {
		t.Errorf("fingerprints after a round trip: %+v %v", fp, err)
	}
	b.Meta.Status = StatusOpen
	b.Save()
	if l, _ := Latest(store, ws); l == nil || l.Meta.ID != b.Meta.ID {
		t.Errorf("Latest should be the newer %s", b.Meta.ID)
	}
	all, err := List(store)
	if err != nil || len(all) != 2 || all[0].Meta.ID != b.Meta.ID {
		t.Fatalf("List = %v, %v", all, err)
	}
	// Prefixes.
	if c, err := Open(store, a.Meta.ID[:6]); err != nil && a.Meta.ID[:6] != b.Meta.ID[:6] || err == nil && c.Meta.ID != a.Meta.ID {
		t.Errorf("Open by prefix: %v %v", c, err)
	}
	if c, err := Open(store, a.Meta.ID); err != nil || c.Meta.Command[0] != "make" {
		t.Errorf("Open by id: %v %v", c, err)
	}
	if _, err := Open(store, "zzz"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open of nothing: %v", err)
	}
	if _, err := Open(store, "../x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open of a path: %v", err)
	}
	// Make an ambiguous prefix for sure.
	os.Mkdir(filepath.Join(store, changesetsDir, "abc000000001"), 0o700)
	os.Mkdir(filepath.Join(store, changesetsDir, "abc000000002"), 0o700)
	if _, err := Open(store, "abc"); !errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), "abc000000001") {
		t.Errorf("Open of an ambiguous prefix: %v", err)
	}
	// Lock contention.
	unlock, err := a.Lock()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Lock(); !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "pinfold process ") {
		t.Errorf("second Lock: %v, want ErrBusy naming the holder", err)
	}
	unlock()
	unlock2, err := a.Lock()
	if err != nil {
		t.Fatalf("Lock after unlock: %v", err)
	}
	unlock2()
	// Remove, read-only directories included.
	ro := filepath.Join(a.Dir, "r0", "upper", "ro")
	os.MkdirAll(filepath.Join(ro, "deep"), 0o755)
	os.WriteFile(filepath.Join(ro, "deep", "f"), []byte("x"), 0o444)
	os.Chmod(filepath.Join(ro, "deep"), 0o500)
	os.Chmod(ro, 0)
	if err := a.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("removed changeset still there: %v", err)
	}
	// The two bare directories have no meta.json (being created): not listed.
	if all, _ := List(store); len(all) != 1 || all[0].Meta.ID != b.Meta.ID {
		t.Errorf("List after Remove: %d changesets", len(all))
	}
}
