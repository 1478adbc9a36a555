// Package cgroup puts a sandbox under Linux control-group limits: memory,
// number of processes and CPU bandwidth.
//
// It works on cgroup v1 hierarchies, on the unified cgroup v2 tree, and on
// hybrid hosts where each controller may live in either. Detect finds where
// the memory, pids and cpu controllers are; New makes one group for a
// sandbox, under a parent named "pinfold", only in the hierarchies its
// Limits need:
//
//   - v1: <hierarchy>/pinfold/<name> in each hierarchy that mounts a needed
//     controller (hierarchies mounting several controllers, such as
//     "cpu,cpuacct", are used once).
//   - v2: <base>/pinfold/<name>, with the needed controllers enabled in the
//     cgroup.subtree_control of <base> and <base>/pinfold. <base> is the
//     cgroup2 root when the caller may write it (pinfold runs as root).
//     Otherwise it is the parent of the caller's own cgroup when that parent
//     was delegated to the caller (its directory, cgroup.subtree_control and
//     cgroup.procs are writable), as systemd does for a user's
//     user@UID.service subtree; "systemd-run --user --scope pinfold ..."
//     gives such a layout. The caller's own cgroup cannot be the base: it
//     holds the caller, and the v2 "no internal processes" rule forbids
//     enabling controllers for children of a cgroup that has processes.
//     pinfold never moves itself to another cgroup to work around this.
//
// A group costs a handful of system calls to create and none at package
// initialisation: the package has no init work, and Detect reads
// /proc/self/mountinfo once (and the cgroup2 root's cgroup.controllers only
// when a controller is not on a v1 hierarchy).
//
// The parent "pinfold" directories and the controllers enabled in
// cgroup.subtree_control are left in place when groups are removed: other
// sandboxes may be using them at the same moment.
package cgroup

import (
	"errors"
	"fmt"
	"math"
)

// Sentinel errors callers can branch on with errors.Is.
var (
	// ErrInvalid marks a bad group name or bad Limits.
	ErrInvalid = errors.New("invalid cgroup configuration")
	// ErrUnsupported marks limits this host cannot apply: a controller is
	// missing, not delegated, or not writable by the caller.
	ErrUnsupported = errors.New("cgroup limits not supported")
)

// MinMemoryBytes is the smallest memory limit accepted: below it not even
// a shell starts, and the failure would look like a crash of the command.
const MinMemoryBytes = 4 << 20

// Bounds on Limits.CPUs. The kernel refuses a CFS quota below 1ms per
// period, which is 0.01 CPUs at the 100ms period used here.
const (
	minCPUs = 0.01
	maxCPUs = 1 << 20
)

// cpuPeriodUs is the CFS period, in microseconds, for CPU limits. It is
// the kernel's default, so v1 groups need only their quota written.
const cpuPeriodUs = 100000

// Limits are the resource limits of one group. A zero field means no limit
// of that kind, and its controller is not touched.
type Limits struct {
	// MemoryBytes caps the group's memory. It caps swap too: the group gets
	// no swap beyond this limit (v1: memory.memsw.limit_in_bytes is set to
	// the same value when the kernel accounts swap; v2: memory.swap.max is
	// 0).
	MemoryBytes int64
	// Pids caps the number of processes and threads in the group.
	Pids int64
	// CPUs caps CPU time, in CPUs: 0.5 is half of one CPU, 2 is two CPUs.
	CPUs float64
}

// Zero reports whether l sets no limit at all.
func (l Limits) Zero() bool {
	return l.MemoryBytes == 0 && l.Pids == 0 && l.CPUs == 0
}

// Validate checks that every limit that is set has a usable value. The
// errors wrap ErrInvalid.
func (l Limits) Validate() error {
	switch {
	case l.MemoryBytes < 0:
		return fmt.Errorf("%w: memory limit %d is negative", ErrInvalid, l.MemoryBytes)
	case l.MemoryBytes != 0 && l.MemoryBytes < MinMemoryBytes:
		return fmt.Errorf("%w: memory limit %d bytes is below the minimum of 4 MiB", ErrInvalid, l.MemoryBytes)
	case l.Pids < 0:
		return fmt.Errorf("%w: process limit %d is negative", ErrInvalid, l.Pids)
	case math.IsNaN(l.CPUs) || l.CPUs < 0:
		return fmt.Errorf("%w: CPU limit %g must be a positive number", ErrInvalid, l.CPUs)
	case l.CPUs != 0 && l.CPUs < minCPUs:
		return fmt.Errorf("%w: CPU limit %g is below the minimum of %g", ErrInvalid, l.CPUs, minCPUs)
	case l.CPUs > maxCPUs:
		return fmt.Errorf("%w: CPU limit %g is above the maximum of %d", ErrInvalid, l.CPUs, maxCPUs)
	}
	return nil
}

// cpuQuotaUs is the CFS quota per cpuPeriodUs for l.CPUs.
func (l Limits) cpuQuotaUs() int64 {
	return int64(math.Round(l.CPUs * cpuPeriodUs))
}

// Stats are counters read from a group after a run. A counter the kernel
// does not provide (memory.peak before Linux 5.19, the oom_kill line of
// v1 memory.oom_control before 4.13) or whose controller the group does
// not use reads as 0.
type Stats struct {
	// OOMKills counts processes the OOM killer killed in the group.
	OOMKills int64
	// MemoryPeak is the highest memory use, in bytes.
	MemoryPeak int64
	// PidsMaxHits counts forks refused because of the process limit.
	PidsMaxHits int64
	// CPUThrottled counts CFS periods in which the group was throttled.
	CPUThrottled int64
}

// maxNameLen bounds group names well below the 255 bytes of a file name.
const maxNameLen = 128

// validName checks that name can be a group directory: one path element
// of letters, digits, '-', '_' and '.', not starting with '.'. A name that
// equals an interface file of cgroupfs ("cgroup.procs") passes here and
// fails at creation with EEXIST.
func validName(name string) error {
	if name == "" || len(name) > maxNameLen {
		return fmt.Errorf("%w: cgroup name %q must have 1 to %d characters", ErrInvalid, name, maxNameLen)
	}
	if name[0] == '.' {
		return fmt.Errorf("%w: cgroup name %q starts with '.'", ErrInvalid, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("%w: cgroup name %q has character %q; use letters, digits, '-', '_' and '.'", ErrInvalid, name, c)
		}
	}
	return nil
}
