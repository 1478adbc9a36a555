package netstack

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// An idle shared helper starts afresh: once no sandbox has been attached
// for ReleaseAfter, it execs its own binary again, keeping its pid, its
// listening socket and the time it is due to exit (resumeEnv). What a
// burst of sandboxes left in the Go runtime is not garbage it could
// collect: the metadata of the heap the burst grew, the goroutine stacks
// kept with dead goroutines and the system stacks of the threads it
// made (an exited thread's stack is freed only when the runtime next
// makes a thread), every goroutine's descriptor (never freed), and the
// first collection's own mark state. In the released helper after 10
// sandboxes that was 3.1 MiB of anonymous memory against 0.9 MiB in a
// helper that has served none; a new process holds the latter, whatever
// came before, and a helper that never collects never pays the former.
//
// resumeEnv is "FD:DEADLINE": the listening socket's descriptor and
// when the helper exits if no sandbox comes (Unix nanoseconds).
const resumeEnv = "PINFOLD_NET_RESUME"

// resumed is what the helper's previous image passed on: its listening
// socket and its exit time; ok is false in a helper started by pinfold.
// The variable goes from the environment: nothing inherits it.
func resumed() (fd int, exitAt time.Time, ok bool) {
	v, set := os.LookupEnv(resumeEnv)
	if !set {
		return -1, time.Time{}, false
	}
	os.Unsetenv(resumeEnv)
	fds, ns, found := strings.Cut(v, ":")
	fd, err1 := strconv.Atoi(fds)
	at, err2 := strconv.ParseInt(ns, 10, 64)
	if !found || err1 != nil || err2 != nil || fd < 3 {
		return -1, time.Time{}, false
	}
	if on, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || on != 1 {
		return -1, time.Time{}, false // not a listening socket
	}
	unix.CloseOnExec(fd)
	// Exec'd as /proc/self/exe, the process is named "exe": it takes its
	// binary's name back, as ps and pgrep show it.
	os.WriteFile("/proc/self/comm", []byte(filepath.Base(os.Args[0])), 0)
	return fd, time.Unix(0, at), true
}

// reexec replaces the process with a new image of its binary that goes
// on listening on lfd and exits at exitAt. It returns only if the exec
// failed, lfd then as it was.
func reexec(lfd int, exitAt time.Time) error {
	if _, err := unix.FcntlInt(uintptr(lfd), unix.F_SETFD, 0); err != nil {
		return err
	}
	env := []string{fmt.Sprintf("%s=%d:%d", resumeEnv, lfd, exitAt.UnixNano())}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, resumeEnv+"=") {
			env = append(env, e)
		}
	}
	// /proc/self/exe: the binary this process runs, even if a newer one
	// has replaced it on disk since.
	err := unix.Exec("/proc/self/exe", os.Args, env)
	unix.CloseOnExec(lfd)
	return fmt.Errorf("re-executing the helper: %w", err)
}
