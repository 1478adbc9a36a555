package changeset

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestReadsNeverFollowSwappedLinks: a live session writes its upper
// directory while the host diffs, exports (a snapshot) or fingerprints
// it. Directories swapped for links to the outside after the scan, and a
// file swapped for a FIFO, must neither lead the host outside nor block
// it: each operation ends, and the secret outside is in none of them.
func TestReadsNeverFollowSwappedLinks(t *testing.T) {
	for _, c := range []struct{ name, upper, lower string }{
		{name: "a changed file's directory becomes a link", upper: "mv a a.moved; ln -s OUT a"},
		{name: "an opaque directory becomes a link", upper: "mv d d.moved; ln -s OUT d"},
		{name: "a changed file becomes a link", upper: "rm a/f.txt; ln -s OUT/f.txt a/f.txt"},
		{name: "a changed file becomes a FIFO", upper: "rm c.txt; mkfifo c.txt"},
		{name: "the original's directory becomes a link", lower: "mv b b.moved; ln -s OUT b"},
	} {
		t.Run(c.name, func(t *testing.T) { swappedLinks(t, c.upper, c.lower) })
	}
}

func swappedLinks(t *testing.T, upper, lower string) {
	o := newOverlay(t)
	secret := "PINFOLD-SECRET-" + filepath.Base(o.dir)
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "f.txt"), secret+"\n", 0o600)
	writeFile(t, filepath.Join(outside, "g"), secret+"\n", 0o600)
	writeFile(t, filepath.Join(outside, "h"), secret+"\n", 0o600)
	// A name that would show if a listing went outside.
	if err := os.Mkdir(filepath.Join(outside, secret+".dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	sh(t, o.lower, "mkdir a b; echo old > a/f.txt; echo gold > b/g; echo c > c.txt")
	o.inside(t, "echo new > a/f.txt; echo gnew > b/g; echo c2 > c.txt; rm -rf d; mkdir d; echo h > d/h")
	es := o.scan(t)
	// What the sandbox does after the scan.
	if upper != "" {
		sh(t, o.upper, strings.ReplaceAll(upper, "OUT", outside))
	}
	if lower != "" {
		sh(t, o.lower, strings.ReplaceAll(lower, "OUT", outside))
	}

	within := func(what string, f func() (string, error)) {
		t.Helper()
		type result struct {
			out string
			err error
		}
		done := make(chan result, 1)
		go func() {
			out, err := f()
			done <- result{out, err}
		}()
		select {
		case r := <-done:
			if strings.Contains(r.out, secret) {
				t.Errorf("%s read the secret through a link: %q", what, r.out)
			}
			t.Logf("%s: %v", what, r.err)
		case <-time.After(20 * time.Second):
			t.Errorf("%s blocked", what)
			// Unblock it: a writer for the FIFO.
			if fd, err := unix.Open(filepath.Join(o.upper, "c.txt"), unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
				unix.Close(fd)
			}
		}
	}
	within("export", func() (string, error) {
		var b bytes.Buffer
		err := Export(&b, o.roots(), es)
		return b.String(), err
	})
	within("diff", func() (string, error) {
		var b bytes.Buffer
		err := WriteDiff(&b, o.roots(), es, DiffOptions{})
		return b.String(), err
	})
	within("stat", func() (string, error) {
		var b bytes.Buffer
		err := WriteStat(&b, o.roots(), es, DiffOptions{})
		return b.String(), err
	})
	within("fingerprint", func() (string, error) {
		fp, err := Fingerprint(o.roots(), es, true)
		return fmt.Sprint(fp), err
	})
	if b, err := os.ReadFile(filepath.Join(outside, "f.txt")); err != nil || string(b) != secret+"\n" {
		t.Errorf("the outside changed: %q %v", b, err)
	}
}
