// Package host is the runtime of backend host: it runs a command directly
// on the host, without a sandbox. A policy has already decided the command
// may (pinfold's plan checks it against host.allow and strips the
// variables that would make it load foreign code); this package only starts
// it, delivers signals and reports its exit status.
//
// Its Features say it isolates nothing: a Spec that asks for a base other
// than the host's, a network other than the host's, mounts or limits is
// refused, never run without them.
package host

import (
	"context"

	"github.com/pinfold/pinfold/sandbox"
)

// Name is the host runtime's backend name.
const Name = "host"

// Runtime is the host sandbox.Runtime.
type Runtime struct{}

// Name returns "host".
func (Runtime) Name() string { return Name }

// Features says what a command on the host gets: the host itself, the
// workspace as it is, a terminal and a timeout.
func (Runtime) Features() sandbox.Features {
	return sandbox.Features{
		Bases:    []sandbox.BaseKind{sandbox.BaseHost},
		Access:   []sandbox.Access{sandbox.AccessReadWrite, sandbox.AccessNone},
		Networks: []sandbox.Network{sandbox.NetworkHost},
		TTY:      true,
		Timeout:  true,
	}
}

// Check always passes: running on the host needs nothing.
func (Runtime) Check(context.Context, *sandbox.Spec) error { return nil }
