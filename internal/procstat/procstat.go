// Package procstat reads what pinfold needs of /proc/PID/stat: a
// process's start time, which tells a live process from a reused pid in
// the names pinfold gives cgroups and containers, and its parent, which
// gives the processes below one (a session's, to freeze or measure);
// and, for the benchmarks, a process's memory (smaps_rollup).
package procstat

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// StartTime returns field 22 of /proc/<pid>/stat (clock ticks since
// boot), or 0 when the process is gone. A zombie is gone: it runs nothing
// and holds nothing, and where no init reaps orphans it may stay a while.
func StartTime(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0
	}
	n, _ := strconv.ParseUint(f[19], 10, 64)
	return n
}

// Alive reports whether the process pid that started at start (StartTime)
// still runs. A zombie is looked at again for up to 200 ms before it is
// called dead: while a thread other than the main one execs (a
// supervisor handing off to its waiter), the main thread is a zombie
// until the exec completes, and the process then runs on with the same
// pid and start time.
func Alive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	for i := 0; ; i++ {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			if _, serr := os.Stat("/proc/" + strconv.Itoa(pid)); serr != nil {
				return false // gone
			}
		} else if j := strings.LastIndexByte(string(b), ')'); j >= 0 {
			f := strings.Fields(string(b[j+1:]))
			if len(f) >= 20 && f[0] != "Z" && f[0] != "X" {
				n, _ := strconv.ParseUint(f[19], 10, 64)
				return n == start
			}
		}
		if i == 10 {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Zombies returns the children of pid that ended and were not waited
// for, as "PID (comm)": a parent that lets them pile up leaks a pid each.
func Zombies(pid int) []string {
	var out []string
	want := strconv.Itoa(pid)
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		if f := strings.Fields(s[i+1:]); len(f) >= 2 && f[0] == "Z" && f[1] == want {
			out = append(out, s[:i+1])
		}
	}
	return out
}

// Descendants returns pid and every process below it, as /proc shows
// them now.
func Descendants(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		children[pp] = append(children[pp], p)
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// Memory is what /proc/PID/smaps_rollup says of a process, in KiB.
type Memory struct {
	Pss, PssAnon, Rss int64
}

// MemoryOf reads pid's Memory (the benchmarks' measure of what a sandbox
// costs the host).
func MemoryOf(pid int) (Memory, error) {
	var m Memory
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return m, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "Pss:":
			m.Pss = v
		case "Pss_Anon:":
			m.PssAnon = v
		case "Rss:":
			m.Rss = v
		}
	}
	return m, nil
}
