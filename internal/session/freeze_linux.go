package session

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pinfold/pinfold/internal/procstat"
)

// Pause and resume freeze every process of a session with the cgroup
// freezer: cgroup v1's freezer controller where the host mounts it, else
// cgroup v2's cgroup.freeze. At start, the supervisor puts the sandbox's
// processes (its init and the agent) into a group of their own, named
// after the session; everything they start inherits it. On cgroup v2 a
// sandbox already in a group of pinfold's (its limits) is frozen there:
// moving it would take it out of its limits.

const freezerV1 = "/sys/fs/cgroup/freezer"

// v2Root is the cgroup v2 mount: the unified tree of a hybrid host, or
// /sys/fs/cgroup itself.
func v2Root() string {
	for _, d := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if _, err := os.Stat(filepath.Join(d, "cgroup.controllers")); err == nil {
			return d
		}
		if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err == nil && d == "/sys/fs/cgroup/unified" {
			return d
		}
	}
	return ""
}

// freezerGroup is where a session's freezer group goes. The groups of
// every store on the host share one directory, and session ids are unique
// only within a store (a copied store holds the same ones): the name
// carries a short hash of the store's path, so that no store freezes,
// thaws or removes another's group.
func (s *Store) freezerGroup(id string) (dir string, v2 bool) {
	name := "session-" + s.freezerTag() + "-" + id
	if fi, err := os.Stat(filepath.Join(freezerV1, "cgroup.procs")); err == nil && !fi.IsDir() {
		return filepath.Join(freezerV1, "pinfold", name), false
	}
	if root := v2Root(); root != "" {
		return filepath.Join(root, "pinfold", name), true
	}
	return "", false
}

// freezerTag is 12 hex digits of the SHA-256 of the store's absolute path.
func (s *Store) freezerTag() string {
	dir := s.Dir
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	sum := sha256.Sum256([]byte(filepath.Clean(dir)))
	return hex.EncodeToString(sum[:6])
}

// v2GroupOf returns the cgroup v2 directory a process is in.
func v2GroupOf(root string, pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return filepath.Join(root, p)
		}
	}
	return ""
}

// setupFreezer puts the sandbox whose init is pid into the session's
// freezer group and returns the group and whether it is cgroup v2 ("" when
// the host has no freezer pinfold may use).
func (s *Store) setupFreezer(id string, pid int) (string, bool, error) {
	dir, v2 := s.freezerGroup(id)
	if dir == "" {
		return "", false, errors.New("no cgroup freezer on this host")
	}
	if v2 {
		if cur := v2GroupOf(filepath.Dir(filepath.Dir(dir)), pid); strings.Contains(cur, "/pinfold/") {
			return cur, true, nil // the sandbox's own limits group
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", v2, err
	}
	for _, p := range procstat.Descendants(pid) {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(p)), 0); err != nil && p == pid {
			os.Remove(dir)
			return "", v2, err
		}
	}
	return dir, v2, nil
}

// removeFreezer removes a session's own freezer group once it is empty.
func (s *Store) removeFreezer(id string) {
	dir, _ := s.freezerGroup(id)
	if dir == "" {
		return
	}
	// Its processes may take a while to die on a busy machine: 5 s.
	for i := 0; i < 500; i++ {
		if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// freeze freezes (or thaws) the group and waits until it is.
func freeze(dir string, v2, on bool) error {
	if dir == "" {
		return errors.New("the session has no freezer group (its runtime has no host pid, or the host no freezer)")
	}
	var file, want, read string
	if v2 {
		file, want, read = "cgroup.freeze", map[bool]string{true: "1", false: "0"}[on], "cgroup.events"
	} else {
		file, want, read = "freezer.state", map[bool]string{true: "FROZEN", false: "THAWED"}[on], "freezer.state"
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(want), 0); err != nil {
		return err
	}
	for i := 1; i <= 500; i++ {
		b, err := os.ReadFile(filepath.Join(dir, read))
		if err != nil {
			return err
		}
		s := string(b)
		if v2 && strings.Contains(s, "frozen "+want) || !v2 && strings.TrimSpace(s) == want {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
		if on && !v2 && i%10 == 0 {
			// The v1 freezer misses a task forked as it freezes, and
			// stays FREEZING: asking again freezes it; now and then a
			// thaw in between unsticks what asking again does not.
			if i%100 == 0 {
				os.WriteFile(filepath.Join(dir, file), []byte("THAWED"), 0)
			}
			os.WriteFile(filepath.Join(dir, file), []byte(want), 0)
		}
	}
	if on {
		// Stuck half way (a process the freezer could not stop, one
		// exiting as it came): never leave a session half frozen, where
		// its processes take no signal and no record says to thaw them.
		thaw := map[bool]string{true: "0", false: "THAWED"}[v2]
		os.WriteFile(filepath.Join(dir, file), []byte(thaw), 0)
	}
	return fmt.Errorf("the freezer of %s did not settle", dir)
}
