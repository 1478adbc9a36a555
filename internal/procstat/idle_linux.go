package procstat

import "golang.org/x/sys/unix"

// Idle gives the process pid the lowest CPU priority (nice 19), for work
// nobody waits for (deleting a discarded changeset), so that it slows the
// next run as little as it can. Its I/O keeps its class: in the idle
// class, deletions fell behind a loop of runs until the disk filled.
func Idle(pid int) {
	unix.Setpriority(unix.PRIO_PROCESS, pid, 19)
}
