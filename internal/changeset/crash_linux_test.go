package changeset

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// childEnv marks the test binary re-executed to run one Apply.
const childEnv = "PINFOLD_CHANGESET_TEST_APPLY"

type childSpec struct {
	Lower, Upper, Journal string
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(applyChild(spec))
	}
	os.Exit(m.Run())
}

func applyChild(spec string) int {
	var s childSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	roots := []Root{{Lower: s.Lower, Upper: s.Upper}}
	es, err := Scan(context.Background(), roots)
	if err == nil {
		_, err = Apply(context.Background(), s.Journal, roots, es, ApplyOptions{})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// crashOverlay makes an overlay whose changeset rewrites, adds and
// deletes a few hundred files, ~60 MB in all, and a pristine copy of the
// original.
func crashOverlay(t *testing.T) (o *overlay, pristine string) {
	o = newOverlay(t)
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 150 {
		size := 1 << (8 + r.IntN(12))
		writeFile(t, filepath.Join(o.lower, fmt.Sprintf("d%d/f%d", i%7, i)), strings.Repeat(fmt.Sprintf("old %d\n", i), size/8), 0o644)
	}
	o.inside(t, `
i=0
for f in d*/f*; do
	i=$((i+1))
	case $((i % 5)) in
	0) rm "$f" ;;
	*) head -c $((i * 1000)) /dev/urandom > "$f.tmp"; cat "$f.tmp" "$f.tmp" > "$f"; rm "$f.tmp" ;;
	esac
done
mkdir -p added/deeper
for i in $(seq 1 100); do head -c $((i * 2000)) /dev/urandom > added/deeper/n$i; done
rm -rf d6
`)
	pristine = filepath.Join(o.dir, "pristine")
	sh(t, o.dir, "cp -a lower pristine")
	return o, pristine
}

// checkTargets checks that every path of the original is either its old
// or its new version, never anything else.
func checkTargets(t *testing.T, o *overlay, pristine string, newOnly bool) {
	t.Helper()
	filepath.WalkDir(o.lower, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			t.Error(err)
			return nil
		}
		rel, _ := filepath.Rel(o.lower, p)
		if d.IsDir() {
			return nil
		}
		if strings.HasPrefix(d.Name(), tmpPrefix) {
			if newOnly {
				t.Errorf("temporary file left: %s", rel)
			}
			return nil
		}
		got, _ := os.ReadFile(p)
		oldData, oerr := os.ReadFile(filepath.Join(pristine, rel))
		newData, nerr := os.ReadFile(filepath.Join(o.upper, rel))
		isOld := oerr == nil && bytes.Equal(got, oldData)
		isNew := nerr == nil && bytes.Equal(got, newData)
		if nerr != nil && oerr == nil && !newOnly {
			isNew = false // unchanged or deleted: old is right
		}
		if newOnly && !isNew && !(nerr != nil && isOld) {
			t.Errorf("%s is not the new version", rel)
		} else if !isOld && !isNew {
			t.Errorf("%s is neither the old nor the new version (%d bytes)", rel, len(got))
		}
		return nil
	})
}

func TestApplyKill9(t *testing.T) {
	o, pristine := crashOverlay(t)
	want := o.merged(t)
	jdir := filepath.Join(o.dir, "journal")
	spec, _ := json.Marshal(childSpec{Lower: o.lower, Upper: o.upper, Journal: jdir})
	child := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
		cmd.Stderr = os.Stderr
		return cmd
	}
	reset := func() {
		os.RemoveAll(jdir)
		sh(t, o.dir, "rm -rf lower && cp -a pristine lower")
	}
	// How long a whole apply takes: the shortest of three, since the
	// first pays for a cold start (its time alone aimed the kills past
	// the apply's end on a loaded machine).
	full := time.Duration(1<<63 - 1)
	for i := 0; i < 3; i++ {
		reset()
		start := time.Now()
		if err := child().Run(); err != nil {
			t.Fatalf("apply in a child: %v", err)
		}
		full = min(full, time.Since(start))
		diffTrees(t, tree(t, o.lower), want)
	}
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	killed := 0
	const tries = 60
	for attempt := 0; attempt < tries && killed < 3; attempt++ {
		reset()
		cmd := child()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(float64(full) * (0.05 + 1.0*r.Float64())))
		cmd.Process.Signal(syscall.SIGKILL)
		err := cmd.Wait()
		if _, jerr := os.Stat(filepath.Join(jdir, journalName)); jerr != nil || err == nil {
			continue // finished, or killed before the journal: try another moment
		}
		killed++
		checkTargets(t, o, pristine, false)
		if err := Recover(context.Background(), jdir, o.roots()); err != nil {
			t.Fatalf("Recover: %v", err)
		}
		checkTargets(t, o, pristine, true)
		diffTrees(t, tree(t, o.lower), want)
		if _, err := os.Stat(filepath.Join(jdir, journalName)); !errors.Is(err, os.ErrNotExist) {
			t.Error("the journal is still there after Recover")
		}
	}
	if killed == 0 {
		t.Fatalf("never killed an apply midway in %d tries (a whole apply takes %v)", tries, full)
	}
	t.Logf("killed %d applies midway; a whole apply takes %v", killed, full)
}

func TestApplyDiskFull(t *testing.T) {
	o := newOverlay(t)
	small := filepath.Join(o.dir, "small")
	if err := os.Mkdir(small, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", small, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mounting a tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(small, 0); err != nil {
			unix.Unmount(small, unix.MNT_DETACH)
		}
	})
	o.lower = filepath.Join(small, "ws")
	writeFile(t, filepath.Join(o.lower, "a"), "old a\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "z"), "old z\n", 0o644)
	pristine := filepath.Join(o.dir, "pristine")
	sh(t, o.dir, "cp -a small/ws pristine")
	o.inside(t, `
echo new a > a
for i in 1 2 3 4; do head -c 400000 /dev/urandom > big$i; done
echo new z > z
`)
	es := o.scan(t)
	jdir := filepath.Join(o.dir, "journal")
	res, err := Apply(context.Background(), jdir, o.roots(), es, ApplyOptions{})
	if !errors.Is(err, unix.ENOSPC) || !strings.Contains(err.Error(), "applied ") {
		t.Fatalf("Apply into a full file system: %v (%+v), want ENOSPC and applied N of M", err, res)
	}
	t.Logf("first apply: %v", err)
	names, _ := os.ReadDir(o.lower)
	for _, n := range names {
		if strings.HasPrefix(n.Name(), tmpPrefix) {
			t.Errorf("temporary file left: %s", n.Name())
		}
	}
	checkTargets(t, o, pristine, false)
	if _, err := os.Stat(filepath.Join(jdir, journalName)); err != nil {
		t.Errorf("the journal should stay for a later apply: %v", err)
	}
	// Free space, apply again.
	if err := unix.Mount("tmpfs", small, "tmpfs", unix.MS_REMOUNT, "size=8m"); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(context.Background(), jdir, o.roots(), es, ApplyOptions{}); err != nil {
		t.Fatalf("Apply after freeing space: %v", err)
	}
	checkTargets(t, o, pristine, true)
	if _, err := os.Stat(filepath.Join(jdir, journalName)); !errors.Is(err, os.ErrNotExist) {
		t.Error("the journal is still there")
	}
}
