package changeset

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// basicOverlay makes an overlay with one change of every kind.
func basicOverlay(t *testing.T) *overlay {
	o := newOverlay(t)
	writeFile(t, filepath.Join(o.lower, "keep"), "keep\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "edit"), "one\ntwo\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "gone"), "bye\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "old"), "moved\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "script"), "#!/bin/sh\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "owned"), "x\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "d/a"), "a\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "d/sub/b"), "b\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "r/x"), "x\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "r/y"), "y\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "f2d"), "file\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "d2f/z"), "z\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "f2l"), "file\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "ro/f"), "f\n", 0o644)
	o.inside(t, `
echo new > added
echo three >> edit
rm gone
mv old renamed
chmod +x script
chown 1234:1234 owned
rm -rf d
rm -rf r && mkdir r && echo y > r/y && echo w > r/w
rm f2d && mkdir f2d && echo in > f2d/in
rm -rf d2f && echo now-a-file > d2f
rm f2l && ln -s keep f2l
ln -s edit link
mkdir -p new/deep/er && echo deep > new/deep/er/file
echo h > h1 && ln h1 h2
mkdir emptydir
: > empty
chmod 555 ro
`)
	return o
}

func TestApplyMatchesOverlay(t *testing.T) {
	o := basicOverlay(t)
	want := o.merged(t)
	es := o.scan(t)
	fp, err := Fingerprint(o.roots(), es, true)
	if err != nil {
		t.Fatal(err)
	}
	jdir := filepath.Join(o.dir, "journal")
	res, err := Apply(context.Background(), jdir, o.roots(), es, ApplyOptions{Fingerprints: fp})
	if err != nil {
		t.Fatal(err)
	}
	if res.Applied != len(es)-1 || res.Skipped != 1 || len(res.Conflicts) != 0 {
		t.Errorf("result %+v, want %d applied and r (an opaque directory with the same mode) skipped", res, len(es)-1)
	}
	diffTrees(t, tree(t, o.lower), want)
	if _, err := os.Stat(filepath.Join(jdir, journalName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("journal left: %v", err)
	}
	a, _ := os.Stat(filepath.Join(o.lower, "h1"))
	b, _ := os.Stat(filepath.Join(o.lower, "h2"))
	if !os.SameFile(a, b) {
		t.Error("h1 and h2 are not one file")
	}
	// Applying again does nothing.
	res, err = Apply(context.Background(), jdir, o.roots(), es, ApplyOptions{Fingerprints: fp})
	if err != nil {
		t.Fatal(err)
	}
	if res.Applied != 0 || res.Skipped != len(es) {
		t.Errorf("second apply: %+v", res)
	}
	if got := o.scan(t); Count(got) != (Counts{}) {
		t.Errorf("after apply the overlay still differs:\n%s", summary(got))
	}
}

func TestApplyOwner(t *testing.T) {
	o := basicOverlay(t)
	es := o.scan(t)
	if _, err := Apply(context.Background(), t.TempDir(), o.roots(), es, ApplyOptions{Owner: &Owner{UID: 4321, GID: 4322}}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"added", "edit", "renamed", "link", "new", "new/deep", "new/deep/er/file", "h2", "emptydir", "f2d", "f2d/in", "d2f"} {
		fi, err := os.Lstat(filepath.Join(o.lower, p))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != 4321 || st.Gid != 4322 {
			t.Errorf("%s owned by %d:%d, want 4321:4322", p, st.Uid, st.Gid)
		}
	}
	fi, _ := os.Lstat(filepath.Join(o.lower, "keep"))
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 {
		t.Errorf("untouched file keep changed owner to %d", st.Uid)
	}
}

func TestApplyConflicts(t *testing.T) {
	o := basicOverlay(t)
	es := o.scan(t)
	fp, err := Fingerprint(o.roots(), es, true)
	if err != nil {
		t.Fatal(err)
	}
	// The user edits the original after the run.
	writeFile(t, filepath.Join(o.lower, "edit"), "user's edit\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "added"), "user made this\n", 0o644)
	os.Remove(filepath.Join(o.lower, "gone"))
	writeFile(t, filepath.Join(o.lower, "d/sub/user-file"), "mine\n", 0o644)
	before := tree(t, o.lower)
	jdir := t.TempDir()
	res, err := Apply(context.Background(), jdir, o.roots(), es, ApplyOptions{Fingerprints: fp})
	var ce *ConflictError
	if !errors.Is(err, ErrConflict) || !errors.As(err, &ce) {
		t.Fatalf("Apply: %v, want a conflict", err)
	}
	got := ""
	for _, c := range res.Conflicts {
		got += c.Path + ": " + c.Why + "\n"
	}
	want := "added: created since the run\nd/sub: created since the run\nd/sub/user-file: created since the run\nedit: changed since the run\n"
	// gone was deleted by the user as by the changeset: no conflict.
	if got != want && got != strings.Replace(want, "d/sub: created since the run\n", "", 1) {
		t.Errorf("conflicts:\n%swant:\n%s", got, want)
	}
	diffTrees(t, tree(t, o.lower), before)
	// --force applies all the same.
	res, err = Apply(context.Background(), jdir, o.roots(), es, ApplyOptions{Fingerprints: fp, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Conflicts) == 0 {
		t.Error("forced apply reports no conflicts")
	}
	if s := readString(t, filepath.Join(o.lower, "edit")); s != "one\ntwo\nthree\n" {
		t.Errorf("edit = %q", s)
	}
	if s := readString(t, filepath.Join(o.lower, "d/sub/user-file")); s != "mine\n" {
		t.Errorf("the user's new file in a deleted directory = %q", s)
	}
}

func TestApplyPartialThenAll(t *testing.T) {
	o := basicOverlay(t)
	want := o.merged(t)
	es := o.scan(t)
	fp, err := Fingerprint(o.roots(), es, true)
	if err != nil {
		t.Fatal(err)
	}
	jdir := t.TempDir()
	res, err := Apply(context.Background(), jdir, o.roots(), es, ApplyOptions{Fingerprints: fp, Paths: []string{"new", "edit", "./r/"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Applied != 7 || res.Skipped != 1 {
		t.Errorf("applied %d, skipped %d, want 7 (new, new/deep, new/deep/er, new/deep/er/file, edit, r/w, r/x) and 1 (r: same mode)", res.Applied, res.Skipped)
	}
	res, err = Apply(context.Background(), jdir, o.roots(), es, ApplyOptions{Fingerprints: fp})
	if err != nil {
		t.Fatalf("apply after a partial apply: %v (%+v)", err, res.Conflicts)
	}
	if res.Skipped != 8 {
		t.Errorf("skipped %d, want 8", res.Skipped)
	}
	diffTrees(t, tree(t, o.lower), want)
}

// TestFingerprintNewTree: a new tree keeps one fingerprint, at its top;
// what is below is known absent from it, so that a file the user makes
// there later (even after a partial apply made the directories) is a
// conflict, not overwritten.
func TestFingerprintNewTree(t *testing.T) {
	o := newOverlay(t)
	writeFile(t, filepath.Join(o.lower, "keep"), "keep\n", 0o644)
	o.inside(t, `mkdir -p tree/a/b && echo 1 > tree/one && echo 2 > tree/a/two && echo 3 > tree/a/b/three && echo k >> keep`)
	es := o.scan(t)
	fp, err := Fingerprint(o.roots(), es, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(fp) != 2 || !fp[FingerprintKey(0, "tree")].Absent || fp[FingerprintKey(0, "keep")].Absent {
		t.Fatalf("fingerprints %v, want tree (absent) and keep", fp)
	}
	jdir := t.TempDir()
	if _, err := Apply(context.Background(), jdir, o.roots(), es, ApplyOptions{Fingerprints: fp, Paths: []string{"tree/one"}}); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(o.lower, "tree/a/b/three"), "the user's\n", 0o644)
	res, err := Apply(context.Background(), jdir, o.roots(), es, ApplyOptions{Fingerprints: fp})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("Apply: %v, want a conflict", err)
	}
	got := ""
	for _, c := range res.Conflicts {
		got += c.Path + ": " + c.Why + "\n"
	}
	// The directories the user made hold what the changeset's do (the
	// same mode): no conflict; the file is one.
	if want := "tree/a/b/three: created since the run\n"; got != want {
		t.Errorf("conflicts:\n%swant:\n%s", got, want)
	}
	if s := readString(t, filepath.Join(o.lower, "tree/a/b/three")); s != "the user's\n" {
		t.Errorf("the user's file = %q", s)
	}
}

// TestFingerprintRerun: a rerun into a changeset merges its fingerprints
// under the first run's, which may say a directory was there; nothing of
// the rerun's is left to be inferred from that directory, so a file the
// user makes where the rerun wrote one is a conflict, not overwritten.
func TestFingerprintRerun(t *testing.T) {
	for _, paths := range [][]string{nil, {"d/new"}} {
		o := newOverlay(t)
		writeFile(t, filepath.Join(o.lower, "d/old"), "old\n", 0o644)
		o.inside(t, `rm -rf d; mkdir d`)
		fp1, err := Fingerprint(o.roots(), o.scan(t), true)
		if err != nil {
			t.Fatal(err)
		}
		os.RemoveAll(filepath.Join(o.lower, "d")) // the user, between the runs
		o.inside(t, `echo run2 > d/new`)
		es2, err := ScanTypes(context.Background(), o.roots())
		if err != nil {
			t.Fatal(err)
		}
		fp, err := Fingerprint(o.roots(), es2, false) // as finishChangeset does for a rerun
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range fp1 {
			fp[k] = v
		}
		writeFile(t, filepath.Join(o.lower, "d/new"), "the user's\n", 0o644) // after the rerun
		res, err := Apply(context.Background(), t.TempDir(), o.roots(), o.scan(t), ApplyOptions{Fingerprints: fp, Paths: paths})
		if got := readString(t, filepath.Join(o.lower, "d/new")); !errors.Is(err, ErrConflict) || got != "the user's\n" {
			t.Errorf("apply %v: %v %v; d/new is %q", paths, err, res.Conflicts, got)
		}
	}
}

func TestApplyRefusesSpecialFiles(t *testing.T) {
	o := newOverlay(t)
	o.inside(t, `echo a > a; mkfifo fifo; mknod dev c 1 3`)
	es := o.scan(t)
	_, err := Apply(context.Background(), t.TempDir(), o.roots(), es, ApplyOptions{})
	if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "fifo: a fifo") || !strings.Contains(err.Error(), "dev: a character device") {
		t.Fatalf("Apply: %v, want ErrUnsafe naming fifo and dev", err)
	}
	if _, err := os.Lstat(filepath.Join(o.lower, "a")); !errors.Is(err, os.ErrNotExist) {
		t.Error("a was written although the apply was refused")
	}
}

func TestApplySymlinkAttack(t *testing.T) {
	o := newOverlay(t)
	outside := t.TempDir()
	writeFile(t, filepath.Join(o.lower, "sub/f"), "f\n", 0o644)
	o.inside(t, `echo changed > sub/f; echo new > sub/g; mkdir sub/dir; echo x > sub/dir/x; rm -f nothing`)
	es := o.scan(t)
	// Between scan and apply, the directory becomes a symlink to outside.
	if err := os.RemoveAll(filepath.Join(o.lower, "sub")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(o.lower, "sub")); err != nil {
		t.Fatal(err)
	}
	_, err := Apply(context.Background(), t.TempDir(), o.roots(), es, ApplyOptions{Force: true})
	if !errors.Is(err, ErrUnsafe) {
		t.Fatalf("Apply: %v, want ErrUnsafe", err)
	}
	if names, _ := os.ReadDir(outside); len(names) != 0 {
		t.Errorf("wrote outside the workspace: %v", names)
	}
	// The same through the race: past the check, at the operation.
	a, err := openApplier(context.Background(), o.roots())
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	a.j = &journal{Tmp: tmpPrefix + "x-", Roots: []journalRoot{{Lower: []byte(o.lower), Upper: []byte(o.upper)}}}
	for i, x := range []op{
		{Kind: opFile, Path: []byte("sub/g"), Mode: 0o644},
		{Kind: opSymlink, Path: []byte("sub/l"), Target: []byte("/")},
		{Kind: opMkdir, Path: []byte("sub/dir")},
		{Kind: opRemove, Path: []byte("sub/f")},
		{Kind: opMeta, Path: []byte("sub"), Mode: uint32(os.ModeDir | 0o755)},
	} {
		a.j.Ops = append(a.j.Ops, x)
		if err := func() error { a.progress, _ = os.Create(filepath.Join(t.TempDir(), "p")); return a.do(i) }(); !errors.Is(err, ErrUnsafe) {
			t.Errorf("%s %s: %v, want ErrUnsafe", x.Kind, x.Path, err)
		}
	}
	if names, _ := os.ReadDir(outside); len(names) != 0 {
		t.Errorf("wrote outside the workspace: %v", names)
	}
}
