package cli_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestPackSameCommitFromAClone packs one commit from its checkout and
// from a fresh clone at the same path (other file times, another umask):
// the same digest.
func TestPackSameCommitFromAClone(t *testing.T) {
	f := newPackFixture(t)
	// A file older than the commit keeps its own time in this checkout;
	// a clone's files are all newer than it.
	old := time.Date(2010, 1, 1, 0, 0, 0, 0, time.UTC)
	os.Chtimes(filepath.Join(f.ws, "hello.txt"), old, old)
	os.Chmod(filepath.Join(f.ws, "hello.txt"), 0o600)
	d1 := f.image(t, "", filepath.Join(f.dir, "checkout.tar"), "--", "./run.sh")
	os.Rename(f.ws, f.ws+".orig")
	mustRun(t, "", "sh", "-c", "umask 002 && git clone -q \"$0\" \"$1\"", f.ws+".orig", f.ws)
	d2 := f.image(t, "", filepath.Join(f.dir, "clone.tar"), "--", "./run.sh")
	if d1 != d2 {
		t.Errorf("the checkout packs to %s, a clone of its commit to %s", d1, d2)
	}
}
