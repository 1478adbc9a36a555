// Package doctor checks that this host can run pinfold's sandboxes, says
// what is missing, and how to fix it.
//
// [Run] runs every check (user namespaces, overlayfs in a user namespace,
// seccomp, cgroups, Landlock, the store, bases, and optionally podman and
// docker) and returns a [Report]; [Apply] applies the few fixes that are
// safe to apply automatically (writing a sysctl under /proc/sys as root,
// creating the store directory). Each check is bounded in time and talks to
// nothing beyond local files, local sockets and short-lived child
// processes.
//
// [Preflight] is the cheap subset the CLI runs before every sandbox spawn:
// can this user create the namespaces the native backend needs, and, when
// limits are asked, can the cgroups enforce them. A passing result is
// cached in a small file keyed by the boot id and the effective uid, so a
// later call costs two small file reads; failures are never cached, so a
// fixed host is seen at once.
//
// The package does no work at initialisation: it is linked into the
// pinfold binary that starts on every command.
package doctor

import (
	"strings"

	"github.com/pinfold/pinfold/internal/cgroup"
)

// Status is the outcome of one check.
type Status string

const (
	// Pass: what the check looks for is there.
	Pass Status = "pass"
	// Warn: something optional is missing, or could not be verified;
	// pinfold's native sandbox still works.
	Warn Status = "warn"
	// Fail: pinfold cannot do what the check is about on this host.
	Fail Status = "fail"
)

// Check is the result of one check.
type Check struct {
	// ID names the check; IDs never change meaning ("userns",
	// "cgroup.controllers", ...). docs/doctor.md lists them.
	ID     string `json:"id"`
	Title  string `json:"title"`
	Status Status `json:"status"`
	// Detail says what was found.
	Detail string `json:"detail"`
	// Fix says what to do about a check that did not pass ("" when it
	// passed).
	Fix string `json:"fix,omitempty"`
	// Fixable is set when Apply can apply Fix.
	Fixable bool `json:"fixable"`

	err  error  // the underlying error, for PreflightError.Unwrap
	host *host  // where the check looked, for Apply
	path string // the file the check is about (the store directory)
}

// Report is the result of Run.
type Report struct {
	Kernel string  `json:"kernel"` // the kernel release (uname -r)
	UID    int     `json:"uid"`    // the effective uid the checks ran as
	Checks []Check `json:"checks"`
}

// Failed reports whether any check failed (warnings do not count).
func (r *Report) Failed() bool {
	for _, c := range r.Checks {
		if c.Status == Fail {
			return true
		}
	}
	return false
}

// Options select what Run checks. The zero value checks everything but the
// slow checks, with the default store.
type Options struct {
	// Slow adds the podman and docker checks, which run those tools and
	// may take seconds.
	Slow bool
	// StoreDir is the store to check; "" means store.DefaultDir (which
	// honours PINFOLD_STORE).
	StoreDir string
	// Workspace, when set, adds a check that its file system supports
	// idmapped mounts (which pinfold needs there when it runs as root).
	Workspace string

	host *host // tests: a fake /proc/sys, probes that fail
}

// Needs says what a sandbox spawn needs from the host.
type Needs struct {
	// Native: the native backend will run (user, mount, pid, ipc, uts,
	// cgroup and network namespaces).
	Native bool
	// Limits: cgroup limits are asked for.
	Limits bool
	// Limit, when not zero, names the limits asked for, so that only
	// their controllers are checked; zero means memory, pids and cpu.
	Limit cgroup.Limits
}

// PreflightError says why the host cannot run a sandbox: the checks that
// failed, each with what was found and how to fix it.
type PreflightError struct {
	Checks []Check // at least one, Status Fail
}

func (e *PreflightError) Error() string {
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
func (e *PreflightError) Unwrap() []error {
	var errs []error
	for _, c := range e.Checks {
		if c.err != nil {
			errs = append(errs, c.err)
		}
	}
	return errs
}

// Limits reports whether a cgroup check failed (the spawn would fail
// because of requested limits rather than missing namespaces).
func (e *PreflightError) Limits() bool {
	for _, c := range e.Checks {
		if strings.HasPrefix(c.ID, "cgroup.") {
			return true
		}
	}
	return false
}
