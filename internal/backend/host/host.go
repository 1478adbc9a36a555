// Package host runs a command directly on the host: backend host. The
// plan has already checked the command against the host allow-list and
// stripped the blocked variables from its environment; this package only
// starts it, relays signals and reports its exit status.
package host
