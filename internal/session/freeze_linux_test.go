package session

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFreezerGroupsPerStore: two stores on one host holding a session of
// the same id (a copied store) get freezer groups of their own: pausing
// one leaves the other running, and ending one leaves the other's group.
func TestFreezerGroupsPerStore(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the cgroup freezer needs root")
	}
	const id = "0123456789ab"
	type sess struct {
		st  *Store
		cmd *exec.Cmd
		out string
		dir string
		v2  bool
	}
	var ss [2]*sess
	for i := range ss {
		s := &sess{st: Open(t.TempDir())}
		s.out = filepath.Join(t.TempDir(), "ticks")
		s.cmd = exec.Command("sh", "-c", `while :; do echo x >> "$0"; sleep 0.02; done`, s.out)
		if err := s.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.cmd.Process.Kill(); s.cmd.Wait() })
		dir, v2, err := s.st.setupFreezer(id, s.cmd.Process.Pid)
		if dir == "" && err != nil {
			t.Skip("no cgroup freezer here: ", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		s.dir, s.v2 = dir, v2
		t.Cleanup(func() { freeze(s.dir, s.v2, false); s.cmd.Process.Kill(); s.cmd.Wait(); s.st.removeFreezer(id) })
		ss[i] = s
	}
	a, b := ss[0], ss[1]
	if a.dir == b.dir || !strings.Contains(a.dir, id) {
		t.Errorf("both stores' sessions %s use %s and %s", id, a.dir, b.dir)
	}
	size := func(p string) int64 {
		fi, err := os.Stat(p)
		if err != nil {
			return 0
		}
		return fi.Size()
	}
	grows := func(p string) bool {
		n := size(p)
		for i := 0; i < 50; i++ {
			time.Sleep(20 * time.Millisecond)
			if size(p) > n {
				return true
			}
		}
		return false
	}
	if err := freeze(a.dir, a.v2, true); err != nil {
		t.Fatal(err)
	}
	if grows(a.out) {
		t.Error("the paused session still runs")
	}
	if !grows(b.out) {
		t.Error("pausing one store's session paused the other store's")
	}
	if err := freeze(a.dir, a.v2, false); err != nil {
		t.Fatal(err)
	}
	if !grows(a.out) {
		t.Error("the resumed session does not run")
	}
	// One session ends: its group goes, the other's stays.
	b.cmd.Process.Kill()
	b.cmd.Wait()
	b.st.removeFreezer(id)
	if _, err := os.Stat(a.dir); err != nil {
		t.Errorf("ending one store's session removed the other's group: %v", err)
	}
}
