package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// testPrefix starts the name of every group the tests make on the host,
// so that leftovers can be told from other users' groups.
var testPrefix = "test-" + strconv.Itoa(os.Getpid()) + "-"

// hostParents are the places a "pinfold" parent can have on the host.
func hostParents() []string {
	parents, _ := filepath.Glob("/sys/fs/cgroup/*/" + parentName)
	return append(parents, "/sys/fs/cgroup/"+parentName)
}

// TestMain fails the run if a test leaves a group behind on the host, and
// removes the "pinfold" parents the run created. Processes orphaned by
// killing a group (a shell's background children) are adopted by the
// test process and reaped at the end, so none stays a zombie even where
// PID 1 does not reap.
func TestMain(m *testing.M) {
	unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	existed := map[string]bool{}
	for _, p := range hostParents() {
		if _, err := os.Stat(p); err == nil {
			existed[p] = true
		}
	}
	code := m.Run()
	for _, p := range hostParents() {
		left, _ := filepath.Glob(p + "/" + testPrefix + "*")
		for _, dir := range left {
			fmt.Fprintf(os.Stderr, "cgroup left behind: %s\n", dir)
			g := &Group{name: filepath.Base(dir), dirs: []string{dir}, rmdir: unix.Rmdir}
			g.Kill()
			g.Remove()
			code = 1
		}
		if !existed[p] {
			os.Remove(p) // fails, as it should, if others use it
		}
	}
	reapOrphans()
	os.Exit(code)
}

// reapOrphans waits, up to 2s, for the adopted children to exit.
func reapOrphans() {
	deadline := time.Now().Add(2 * time.Second)
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		switch {
		case err == unix.EINTR || pid > 0:
		case err != nil || time.Now().After(deadline):
			return // ECHILD: none left
		default:
			time.Sleep(5 * time.Millisecond)
		}
	}
}
