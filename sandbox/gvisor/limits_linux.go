package gvisor

import (
	"fmt"
	"path/filepath"
	goruntime "runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/internal/cgroup"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/container"
)

// cgroupRoot is where runsc looks for the hierarchies a cgroupsPath
// names (it reads no mount table).
const cgroupRoot = "/sys/fs/cgroup"

// Host pids a gVisor sandbox needs besides its tasks: the gofer's and the
// Sentry's own threads (about 25 when idle on 2 CPUs; the Go runtime's
// grow with the CPUs and with blocking system calls). Each process the
// command starts costs about two more under systrap (its stub process
// and the thread serving it).
var pidsBase = 64 + 4*int64(goruntime.NumCPU())

const pidsPerTask = 2

// hostLimits turns the Spec's limits into the host group's. Memory and
// CPU are the same: the Sentry's memory is what the command allocates
// plus its own, and its CPU time is the command's. A pids limit counts
// host threads, not the Sentry's tasks, so it is scaled (pidsBase,
// pidsPerTask).
func hostLimits(l sandbox.Limits) cgroup.Limits {
	h := cgroup.Limits{MemoryBytes: l.Memory, CPUs: l.CPUs}
	if l.Pids > 0 {
		h.Pids = pidsBase + pidsPerTask*l.Pids
	}
	return h
}

// limits checks that the host can enforce the Spec's limits where runsc
// will look for them.
func (s *Sandbox) limits() error {
	s.cglim = hostLimits(s.spec.Limits)
	if s.cglim.Zero() {
		return nil
	}
	sys, err := cgroup.Detect()
	if err == nil {
		err = sys.Supports(s.cglim)
	}
	if err != nil {
		return &sandbox.SpecError{Field: "limits", Err: fmt.Errorf("%w: %w", sandbox.ErrLimits, err)}
	}
	s.cgsys = sys
	return nil
}

// group makes the host cgroup of one run and returns it with the
// cgroupsPath that names it to runsc. runsc moves itself, its gofer and
// its Sentry into the cgroupsPath of the bundle (without one, into a new
// group at each hierarchy's root, leaving any group it was started in:
// why a group runsc was merely started in bounded nothing). A group
// that already exists is not touched by runsc nor removed by it, so
// pinfold makes it, writes the limits and reads its counters after the
// run, as for a native sandbox.
func (s *Sandbox) group() (*cgroup.Group, string, error) {
	if s.cgsys == nil {
		return nil, "", nil
	}
	// Named like a native sandbox's (OWNER-N), so that pinfold clean
	// removes it once its pinfold is gone.
	name := container.Owner() + "-g" + randomID()
	g, err := s.cgsys.New(name, s.cglim)
	if err != nil {
		return nil, "", &sandbox.SpecError{Field: "limits", Err: fmt.Errorf("%w: %w", sandbox.ErrLimits, err)}
	}
	path := "/pinfold/" + name
	for _, f := range g.ProcsFiles() {
		dir := filepath.Dir(f)
		rel, err := filepath.Rel(cgroupRoot, dir)
		ok := err == nil && strings.HasSuffix("/"+rel, path)
		if ok {
			// v1: cgroupRoot/CONTROLLER/pinfold/NAME; cgroup v2 only:
			// cgroupRoot/pinfold/NAME. A controller on the cgroup2
			// tree of a hybrid host is not where runsc looks.
			head := strings.TrimSuffix("/"+rel, path)
			ok = head == "" || !strings.Contains(head[1:], "/") && head != "/unified"
		}
		if !ok {
			g.Remove()
			return nil, "", &sandbox.SpecError{Field: "limits", Err: fmt.Errorf("%w: the cgroup %s is not where runsc looks for %s", sandbox.ErrLimits, dir, path)}
		}
	}
	return g, path, nil
}

// hit adds the limits the run ran into to r: a memory limit kills the
// Sentry (the whole sandbox), as the kernel's OOM killer would kill a
// native sandbox's command; past the pids limit the Sentry cannot make a
// thread and the sandbox ends.
func hit(r *sandbox.Result, st cgroup.Stats) {
	if st.OOMKills > 0 {
		r.LimitsHit = append(r.LimitsHit, sandbox.LimitMemory)
		if r.Reason != sandbox.ReasonExited && r.Reason != sandbox.ReasonTimeout {
			r.Reason = sandbox.ReasonOOM
		}
	}
	if st.PidsMaxHits > 0 {
		r.LimitsHit = append(r.LimitsHit, sandbox.LimitPids)
	}
}

// removeGroups removes what is left of the groups runsc made for a run
// in the other hierarchies: it removes them itself when it ends
// normally, not when its sandbox failed to start.
func removeGroups(name string) {
	ds, _ := filepath.Glob(cgroupRoot + "/*/pinfold/" + name)
	for _, d := range ds {
		unix.Rmdir(d)
	}
}
