package gvisor

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/internal/procstat"
)

// Leftovers lists what runs of killed pinfold processes left: their
// directories in Dir and the runsc processes still serving them.
func Leftovers(ctx context.Context) ([]string, error) {
	var left []string
	for _, d := range deadDirs() {
		left = append(left, "gvisor "+d)
		for _, pid := range processesUnder(d) {
			left = append(left, "runsc process "+strconv.Itoa(pid))
		}
	}
	for _, g := range deadGroups() {
		left = append(left, "cgroup "+g)
	}
	return left, nil
}

// Clean kills the runsc processes of killed runs, removes their
// directories and returns what it removed (a sandbox.Cleaner).
func (r *Runtime) Clean(ctx context.Context) ([]string, error) {
	var removed []string
	for _, d := range deadDirs() {
		for _, pid := range processesUnder(d) {
			syscallKill(pid)
		}
		if err := removeTree(d); err != nil {
			return removed, err
		}
		removed = append(removed, "gvisor sandbox "+d)
	}
	for _, g := range deadGroups() {
		if unix.Rmdir(g) == nil {
			removed = append(removed, "cgroup "+g)
		}
	}
	return removed, nil
}

// deadGroups lists the cgroup directories of killed runs with limits:
// the native runtime's Clean removes the groups pinfold made, but runsc
// made one of its own in every other hierarchy (freezer, cpuset, ...),
// which it removes only when it ends normally.
func deadGroups() []string {
	ds, _ := filepath.Glob(cgroupRoot + "/*/pinfold/*-g*")
	v2, _ := filepath.Glob(cgroupRoot + "/pinfold/*-g*")
	var dead []string
	for _, d := range append(ds, v2...) {
		// OWNER-gID, OWNER being PID-STARTTIME.
		parts := strings.Split(filepath.Base(d), "-")
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "g") {
			continue
		}
		pid, err1 := strconv.Atoi(parts[0])
		start, err2 := strconv.ParseUint(parts[1], 10, 64)
		if err1 != nil || err2 != nil || (procstat.StartTime(pid) == start && start != 0) {
			continue
		}
		dead = append(dead, d)
	}
	return dead
}

// deadDirs lists the sandbox directories whose pinfold process is gone.
func deadDirs() []string {
	ents, err := os.ReadDir(Dir)
	if err != nil {
		return nil
	}
	var dead []string
	for _, e := range ents {
		// OWNER-ID, OWNER being PID-STARTTIME.
		parts := strings.Split(e.Name(), "-")
		if len(parts) != 3 || !e.IsDir() {
			continue
		}
		pid, err1 := strconv.Atoi(parts[0])
		start, err2 := strconv.ParseUint(parts[1], 10, 64)
		if err1 != nil || err2 != nil || (procstat.StartTime(pid) == start && start != 0) {
			continue
		}
		dead = append(dead, filepath.Join(Dir, e.Name()))
	}
	return dead
}

// processesUnder lists the processes whose command line names dir (runsc
// and its sandbox and gofer carry the bundle's or state's path).
func processesUnder(dir string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), dir+"/") {
			pids = append(pids, pid)
		}
	}
	return pids
}

func syscallKill(pid int) { unix.Kill(pid, unix.SIGKILL) }
