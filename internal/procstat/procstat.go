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

// stat is what pinfold reads of /proc/<pid>/stat.
type stat struct {
	comm  string // "pid (comm)", as the file begins
	state string
	ppid  int
	start uint64
}

// readStat parses /proc/<pid>/stat; ok is false when it cannot be read.
// The command may hold spaces and parentheses: the fields are counted
// from its last ')'.
func readStat(pid string) (st stat, ok bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return st, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return st, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return st, false
	}
	st.comm, st.state = s[:i+1], f[0]
	st.ppid, _ = strconv.Atoi(f[1])
	if len(f) >= 20 {
		st.start, _ = strconv.ParseUint(f[19], 10, 64)
	}
	return st, true
}

// running says the process runs (not a zombie, nor being reaped).
func (st stat) running() bool { return st.state != "Z" && st.state != "X" }

// StartTime returns field 22 of /proc/<pid>/stat (clock ticks since
// boot), or 0 when the process is gone. A zombie is gone: it runs nothing
// and holds nothing, and where no init reaps orphans it may stay a while.
func StartTime(pid int) uint64 {
	st, ok := readStat(strconv.Itoa(pid))
	if !ok || !st.running() {
		return 0
	}
	return st.start
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
	p := strconv.Itoa(pid)
	for i := 0; ; i++ {
		st, ok := readStat(p)
		if ok && st.running() {
			return st.start == start
		}
		if !ok {
			if _, err := os.Stat("/proc/" + p); err != nil {
				return false // gone
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
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if st, ok := readStat(e.Name()); ok && st.state == "Z" && st.ppid == pid {
			out = append(out, st.comm)
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
		if st, ok := readStat(e.Name()); ok {
			children[st.ppid] = append(children[st.ppid], p)
		}
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
