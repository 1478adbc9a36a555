package native

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"

	"github.com/pinfold/pinfold/internal/cgroup"
	"github.com/pinfold/pinfold/internal/procstat"
	"github.com/pinfold/pinfold/internal/store"
	"github.com/pinfold/pinfold/sandbox"
)

var _ sandbox.Cleaner = (*Runtime)(nil)

// Clean is the package's Clean for the runtime's store (WithStore's).
func (r *Runtime) Clean(ctx context.Context) ([]string, error) { return Clean(ctx, r.options().store) }

// Clean removes what sandboxes of processes that no longer exist left
// behind: their cgroups and the store's temporary directories. A process
// killed with SIGKILL takes its sandbox down with it (the kernel kills the
// sandbox's PID 1 and with it the namespaces and mounts), but cannot remove
// those. Sandboxes of live processes are left alone. storeDir empty means
// the default store. It returns what it removed.
func Clean(ctx context.Context, storeDir string) ([]string, error) {
	var removed []string
	var errs []error
	if sys, err := cgroup.Detect(); err == nil {
		names, err := sys.Clean(instanceAlive)
		for _, n := range names {
			removed = append(removed, "cgroup "+n)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if storeDir == "" {
		d, err := store.DefaultDir()
		if err != nil {
			return removed, err
		}
		storeDir = d
	}
	if _, err := os.Stat(storeDir); err == nil {
		st, err := store.Open(storeDir)
		if err != nil {
			errs = append(errs, err)
		} else {
			dirs, err := st.CleanTmp()
			for _, d := range dirs {
				removed = append(removed, "temporary directory "+d)
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	return removed, errors.Join(errs...)
}

// CleanOf removes the cgroups of the sandboxes of one process, pid that
// started at start (procstat.StartTime), once it no longer runs: what a
// caller that found that process dead (a session's supervisor) may clean
// without judging every other process's sandboxes on the host. It
// returns what it removed.
func CleanOf(ctx context.Context, pid int, start uint64) ([]string, error) {
	sys, err := cgroup.Detect()
	if err != nil {
		return nil, nil
	}
	prefix := strconv.Itoa(pid) + "-" + strconv.FormatUint(start, 10) + "-"
	names, err := sys.Clean(func(name string) bool {
		return !strings.HasPrefix(name, prefix) || procstat.Alive(pid, start)
	})
	removed := make([]string, 0, len(names))
	for _, n := range names {
		removed = append(removed, "cgroup "+n)
	}
	return removed, err
}

// instanceAlive reports whether the process that named an instance
// "<pid>-<start time>-<n>" still runs. Names of another form are kept.
func instanceAlive(name string) bool {
	f := strings.SplitN(name, "-", 3)
	if len(f) < 2 {
		return true
	}
	pid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return true
	}
	// Not a single look: a run or session handing off to its waiter
	// from a thread other than its main one looks dead for a moment,
	// and its groups must not be taken for a dead one's.
	return procstat.Alive(pid, start)
}
