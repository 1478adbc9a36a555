package changeset

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
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
	// Only pinfold enters r0; its upper directory has the root's mode
	// (what the merged root shows), at least rwx for its owner.
	os.Chmod(ws, 0o751)
	for d, want := range map[string]os.FileMode{"r0": 0o700, "r0/work": 0o700} {
		fi, err := os.Stat(filepath.Join(a.Dir, d))
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v", d, fi, err)
		}
	}
	c, err := Create(store, ws, nil, []string{"true"})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(c.Dir, "r0", "upper")); err != nil || fi.Mode().Perm() != 0o751 {
		t.Errorf("r0/upper of a 0751 root: %v %v", fi, err)
	}
	c.Remove()
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

func TestEmptyTrashInTwoSteps(t *testing.T) {
	store := t.TempDir()
	c, err := Create(store, t.TempDir(), nil, []string{"true"})
	if err != nil {
		t.Fatal(err)
	}
	upper := c.Roots()[0].Upper
	deep := filepath.Join(upper, "a", "b")
	os.MkdirAll(deep, 0o755)
	os.WriteFile(filepath.Join(deep, "f"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(upper, "g"), []byte("y"), 0o644)
	os.Chmod(deep, 0o500) // read-only: files in it still go
	if err := c.Trash(); err != nil {
		t.Fatal(err)
	}
	trash := filepath.Join(store, trashDir)
	ents := func() []string {
		var names []string
		es, _ := os.ReadDir(trash)
		for _, e := range es {
			names = append(names, e.Name())
		}
		return names
	}
	files := func() (n int) {
		filepath.WalkDir(trash, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				n++
			}
			return nil
		})
		return n
	}
	// First the files go; the directories stay to cool down.
	if any, err := EmptyTrash(store, false); !any || err != nil {
		t.Fatalf("first pass: %v %v", any, err)
	}
	names := ents()
	if len(names) != 1 || !strings.Contains(names[0], dirsSuffix) || files() != 0 {
		t.Fatalf("after the first pass: %v, %d files", names, files())
	}
	if _, err := os.Stat(filepath.Join(trash, names[0], "r0", "upper", "a", "b")); err != nil {
		t.Fatalf("the directories went at once: %v", err)
	}
	EmptyTrash(store, false)
	if len(ents()) != 1 {
		t.Fatalf("removed before cooling down: %v", ents())
	}
	// Cooled down: they go.
	name, _, _ := strings.Cut(names[0], dirsSuffix)
	old := name + dirsSuffix + strconv.FormatInt(time.Now().Add(-coolDown-time.Second).Unix(), 10)
	os.Rename(filepath.Join(trash, names[0]), filepath.Join(trash, old))
	EmptyTrash(store, false)
	if len(ents()) != 0 {
		t.Fatalf("not removed after cooling down: %v", ents())
	}
	// all removes everything at once.
	c, _ = Create(store, t.TempDir(), nil, []string{"true"})
	os.WriteFile(filepath.Join(c.Roots()[0].Upper, "f"), []byte("x"), 0o644)
	c.Trash()
	if any, err := EmptyTrash(store, true); !any || err != nil || len(ents()) != 0 {
		t.Fatalf("all: %v %v %v", any, err, ents())
	}
}

// TestCreateLocked: the changeset is locked from before its meta.json is
// written, so that nothing takes it for the leftover of a killed run.
func TestCreateLocked(t *testing.T) {
	store := t.TempDir()
	c, unlock, err := CreateLocked(store, t.TempDir(), nil, []string{"true"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := Open(store, c.Meta.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Lock(); !errors.Is(err, ErrBusy) {
		t.Errorf("a new changeset is not locked: %v", err)
	}
	unlock()
	u, err := other.Lock()
	if err != nil {
		t.Fatalf("after unlock: %v", err)
	}
	u()
}
