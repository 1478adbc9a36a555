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
// The cheap subset run before every sandbox spawn is the native runtime's
// own Check (internal/preflight, which this package shares its probes
// with): the runtimes sit below this package and never import it.
//
// The package does no work at initialisation: it is linked into the
// pinfold binary that starts on every command.
package doctor

import "github.com/pinfold/pinfold/internal/preflight"

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

// fromPreflight is a check the preflight package made, as doctor reports
// it.
func fromPreflight(c preflight.Check) Check {
	return Check{ID: c.ID, Title: c.Title, Status: Status(c.Status), Detail: c.Detail, Fix: c.Fix, Fixable: c.Fixable}
}
