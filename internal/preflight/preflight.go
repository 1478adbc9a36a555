// Package preflight checks, before a sandbox spawn, what the native
// runtime needs from this host: that this user can create the sandbox's
// namespaces and, when limits are asked, that cgroups can enforce them.
// A pass is cached per boot in a small file, so a later spawn costs two
// small file reads; failures are never cached, so a fixed host is seen at
// once.
//
// It sits below the runtimes (sandbox/native calls [Run] in its Check)
// and below internal/doctor, which shares its probes (the [Host] type,
// the sysctls that forbid user namespaces) for its fuller report. It
// imports no other pinfold package but cgroup, and does no work at
// initialisation: it is linked into the pinfold binary that starts on
// every command.
package preflight

import (
	"strings"

	"github.com/pinfold/pinfold/internal/cgroup"
)

// Status is the outcome of one check.
type Status string

const (
	// Pass: what the check looks for is there.
	Pass Status = "pass"
	// Warn: something optional is missing, or could not be verified.
	Warn Status = "warn"
	// Fail: the sandbox cannot be run on this host as asked.
	Fail Status = "fail"
)

// Check is the result of one check (internal/doctor reports the same
// fields).
type Check struct {
	ID      string
	Title   string
	Status  Status
	Detail  string // what was found
	Fix     string // what to do about a check that did not pass
	Fixable bool   // a fix internal/doctor can apply
	Err     error  // the underlying error, if any
}

// Needs says what a sandbox spawn needs from the host.
type Needs struct {
	// Native: the native runtime will run (user, mount, pid, ipc, uts,
	// cgroup and network namespaces).
	Native bool
	// Limits: cgroup limits are asked for.
	Limits bool
	// Limit, when not zero, names the limits asked for, so that only
	// their controllers are checked; zero means memory, pids and cpu.
	Limit cgroup.Limits
}

// AllLimits are the limits checked when Needs.Limit is zero: every
// controller pinfold uses.
var AllLimits = cgroup.Limits{MemoryBytes: 64 << 20, Pids: 64, CPUs: 1}

// Error says why the host cannot run a sandbox: the checks that failed,
// each with what was found and how to fix it.
type Error struct {
	Checks []Check // at least one, Status Fail
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("the native sandbox cannot run here: ")
	for i, c := range e.Checks {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(c.Title)
		b.WriteString(": ")
		b.WriteString(c.Detail)
		if c.Fix != "" {
			b.WriteString(" (fix: ")
			b.WriteString(c.Fix)
			b.WriteByte(')')
		}
	}
	return b.String()
}

// Unwrap returns the errors behind the failed checks; a cgroup check's
// wraps cgroup.ErrUnsupported.
func (e *Error) Unwrap() []error {
	var errs []error
	for _, c := range e.Checks {
		if c.Err != nil {
			errs = append(errs, c.Err)
		}
	}
	return errs
}

// Limits reports whether a cgroup check failed (the spawn would fail
// because of requested limits rather than missing namespaces).
func (e *Error) Limits() bool {
	for _, c := range e.Checks {
		if strings.HasPrefix(c.ID, "cgroup.") {
			return true
		}
	}
	return false
}
