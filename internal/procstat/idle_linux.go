package procstat

import "golang.org/x/sys/unix"

// Idle gives the process pid the lowest CPU and disk priority (nice 19,
// the idle I/O class), for work nobody waits for (deleting a discarded
// changeset), so that it slows the next run as little as it can.
func Idle(pid int) {
	unix.Setpriority(unix.PRIO_PROCESS, pid, 19)
	const whoProcess, classIdle = 1, 3
	unix.Syscall(unix.SYS_IOPRIO_SET, whoProcess, uintptr(pid), classIdle<<13)
}
