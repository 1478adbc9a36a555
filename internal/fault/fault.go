// Package fault defines pinfold's user-facing errors: a stable code, a one
// line of what failed, why, and how to fix it, plus the exit status the
// CLI uses. Libraries return ordinary wrapped errors; the CLI classifies
// them into a *Error at the edge (see docs/errors.md for the codes).
package fault

import (
	"errors"
	"strings"
)

// Exit statuses of pinfold's own failures (the command's own status
// passes through otherwise).
const (
	ExitTimeout     = 124 // the --timeout limit fired
	ExitFailed      = 125 // pinfold itself failed
	ExitCannotExec  = 126 // the command exists but cannot be executed
	ExitNotFound    = 127 // the command was not found in the sandbox
	ExitUsage       = 125 // bad flags or arguments, like podman and docker
	ExitSignalBase  = 128 // plus N when signal N killed the command
	ExitInterrupted = 130
)

// Code identifies a kind of failure; codes never change meaning.
type Code string

const (
	Usage            Code = "PF101" // unknown flag, missing value, bad syntax
	BadValue         Code = "PF102" // a flag value that does not parse
	WorkspaceRefuse  Code = "PF110" // a workspace pinfold will not expose
	WorkspaceMissing Code = "PF111" // the workspace does not exist
	BadBase          Code = "PF120" // the base cannot be used
	BaseImport       Code = "PF121" // importing a tarball base failed
	BadMount         Code = "PF122" // a --mount cannot be made
	BaseBuild        Code = "PF123" // building a curated base failed (mirror, disk, tool)
	FormatMismatch   Code = "PF124" // a store object written by another format version
	CapUnknown       Code = "PF125" // no capability of that name
	CapUnavailable   Code = "PF126" // the capability has no packages for the base
	MissingLibrary   Code = "PF127" // a system library the command needs is not in the sandbox
	Limits           Code = "PF130" // this host cannot enforce a requested limit
	Setup            Code = "PF140" // the kernel refused a step of building the sandbox
	IDMap            Code = "PF141" // idmapped mounts unsupported where needed
	Unsupported      Code = "PF142" // no native sandbox on this architecture, or not Linux
	RuntimeLacks     Code = "PF143" // the backend cannot enforce what the plan asks
	NotFound         Code = "PF150" // the command is not in the sandbox
	CannotExec       Code = "PF151" // the command cannot be executed
	Store            Code = "PF160" // the store cannot be used
	InitRefused      Code = "PF171" // pinfold init would overwrite a pinfold.yaml
	SessionNotFound  Code = "PF190" // no session of that id or name
	SessionRefused   Code = "PF191" // a session cannot be started or asked
	SessionEnded     Code = "PF192" // the session is not running (stopped, lost)
	APIAuth          Code = "PF193" // the API refused the request's credentials
	API              Code = "PF194" // the API server cannot be reached or failed
	Internal         Code = "PF199" // a bug in pinfold
)

// Error is a failure explained for users.
type Error struct {
	Code Code
	What string // one line
	Why  string
	Fix  string
	Exit int
	Err  error
}

// New returns an Error that exits with ExitFailed.
func New(code Code, what, why, fix string, err error) *Error {
	return &Error{Code: code, What: what, Why: why, Fix: fix, Exit: ExitFailed, Err: err}
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(string(e.Code))
	b.WriteByte(' ')
	b.WriteString(e.What)
	if e.Why != "" {
		b.WriteString("\n  Why: ")
		b.WriteString(e.Why)
	}
	if e.Fix != "" {
		b.WriteString("\n  Fix: ")
		b.WriteString(e.Fix)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// ExitCode returns the exit status for err: the Error's own, or
// ExitFailed for anything else.
func ExitCode(err error) int {
	var e *Error
	if errors.As(err, &e) && e.Exit != 0 {
		return e.Exit
	}
	return ExitFailed
}
