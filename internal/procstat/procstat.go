// Package procstat reads what pinfold needs of /proc/PID/stat: a
// process's start time, which tells a live process from a reused pid in
// the names pinfold gives cgroups and containers.
package procstat

import (
	"os"
	"strconv"
	"strings"
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
