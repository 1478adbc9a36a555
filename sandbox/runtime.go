package sandbox

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
)

// Runtime makes sandboxes of one kind.
type Runtime interface {
	// Name is the runtime's backend name: "native", "host", "podman"...
	Name() string
	// Check reports whether this host can run spec on the runtime: nil,
	// or a *CheckError that says what is missing and how to fix it. New
	// does not call it; callers check once, before they build anything.
	Check(ctx context.Context, spec *Spec) error
	// Features says what the runtime can enforce.
	Features() Features
	// New prepares a sandbox for spec. A spec that needs a feature the
	// runtime lacks is refused with an *UnsupportedError.
	New(ctx context.Context, spec Spec) (Sandbox, error)
}

// Sandbox runs commands, each in a fresh instance of its Spec.
type Sandbox interface {
	// Run starts cmd. The command runs until it ends, Wait is called on a
	// cancelled ctx, or its Timeout fires.
	Run(ctx context.Context, cmd *Cmd) (Process, error)
	// Close releases what New prepared. Processes already running are not
	// affected.
	Close() error
}

// Process is a command running in a sandbox.
type Process interface {
	// Wait waits for the command to end and reports how. By then nothing
	// the command started is running and its output has been copied.
	Wait() (*Result, error)
	// Signal sends sig to the command's process group.
	Signal(sig os.Signal) error
	// Resize changes the size of the command's terminal (Cmd.TTY).
	Resize(rows, cols uint16) error
}

// Features is what a runtime can enforce. A zero field means the runtime
// cannot: a Spec that needs it is refused, never run without it.
type Features struct {
	// Isolated is false for a runtime that runs commands on the host
	// itself (the other fields then describe the host as it is).
	Isolated bool
	Bases    []BaseKind
	Access   []Access
	Networks []Network
	// ImageFiles takes an oci base from a file (Base.Path: a layout or
	// an archive) besides a registry reference (Base.Ref).
	ImageFiles bool
	// Publish forwards host ports into the sandbox (NetPolicy.Publish).
	Publish bool
	// HostLoopback reaches the host's loopback from inside
	// (NetPolicy.HostLoopback).
	HostLoopback bool
	// Captures keeps writes to directories besides the workspace aside.
	Captures bool
	// Memory, Pids and CPUs are the cgroup limits.
	Memory, Pids, CPUs bool
	// Scratch mounts a host directory at /tmp (Spec.Scratch).
	Scratch bool
	// BaseWrites captures writes to the base (Spec.BaseWrites).
	BaseWrites bool
	// Capabilities grants Linux capabilities inside (Spec.Capabilities).
	Capabilities bool
	// Root runs the command as root in the sandbox's user namespace.
	Root bool
	// Mounts binds host paths read-only (Spec.Mounts).
	Mounts bool
	// WritableMounts binds them read-write too: a runtime that copies
	// mounts into a remote sandbox cannot carry writes back as they
	// happen.
	WritableMounts bool
	Hostname       bool
	TTY            bool
	Timeout        bool
}

// Supports returns nil when the runtime can run cmd (nil: any command)
// in spec as asked, or an *UnsupportedError naming the first feature it
// cannot honour.
func (f *Features) Supports(runtime string, spec *Spec, cmd *Cmd) error {
	no := func(feature, asked string) error {
		return &UnsupportedError{Runtime: runtime, Feature: feature, Asked: asked}
	}
	kind := spec.Base.Kind
	if kind == "" {
		kind = BaseHost
	}
	switch {
	case !slices.Contains(f.Bases, kind):
		return no("base", string(kind))
	case spec.Access != "" && !slices.Contains(f.Access, spec.Access):
		return no("workspace access", string(spec.Access))
	case kind == BaseOCI && spec.Base.Path != "" && !f.ImageFiles:
		return no("base", "an image file ("+spec.Base.Path+"): this runtime pulls images by reference; push it to a registry and use oci:REF")
	case spec.Network != "" && !slices.Contains(f.Networks, spec.Network):
		return no("network", string(spec.Network))
	case len(spec.Net.Publish) > 0 && !f.Publish:
		return no("published ports", strings.Join(spec.Net.Publish, ", "))
	case spec.Net.HostLoopback && spec.Network != NetworkHost && !f.HostLoopback: // the host's network has its loopback already
		return no("host loopback", "10.0.2.2, the host's loopback")
	case len(spec.Captures) > 0 && !f.Captures:
		return no("captures", spec.Captures[0].Path)
	case spec.Limits.Memory > 0 && !f.Memory:
		return no("memory limit", fmt.Sprint(spec.Limits.Memory))
	case spec.Limits.Pids > 0 && !f.Pids:
		return no("pids limit", fmt.Sprint(spec.Limits.Pids))
	case spec.Limits.CPUs > 0 && !f.CPUs:
		return no("cpu limit", fmt.Sprint(spec.Limits.CPUs))
	case spec.Scratch != "" && !f.Scratch:
		return no("scratch /tmp", spec.Scratch)
	case spec.BaseWrites != "" && !f.BaseWrites:
		return no("base writes", spec.BaseWrites)
	case len(spec.Capabilities) > 0 && !f.Capabilities:
		return no("capabilities", strings.Join(spec.Capabilities, ", "))
	case spec.Root && !f.Root:
		return no("root user", "root")
	case len(spec.Mounts) > 0 && !f.Mounts:
		return no("mounts", spec.Mounts[0].Target)
	case !f.WritableMounts && writableMount(spec) != "":
		return no("read-write mount", writableMount(spec))
	case spec.Hostname != "" && spec.Hostname != DefaultHostname && !f.Hostname:
		return no("hostname", spec.Hostname)
	}
	if cmd != nil {
		switch {
		case cmd.TTY && !f.TTY:
			return no("terminal", "tty")
		case cmd.Timeout > 0 && !f.Timeout:
			return no("timeout", cmd.Timeout.String())
		}
	}
	return nil
}

// writableMount returns the target of the spec's first read-write mount.
func writableMount(spec *Spec) string {
	for _, m := range spec.Mounts {
		if !m.ReadOnly {
			return m.Target
		}
	}
	return ""
}

// UnsupportedError reports a Spec or Cmd that needs what a runtime cannot
// enforce.
type UnsupportedError struct {
	Runtime string
	Feature string // "network", "memory limit", "terminal"...
	Asked   string // what was asked for
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("the %s runtime cannot enforce the %s asked for (%s)", e.Runtime, e.Feature, e.Asked)
}

// CheckError is a failed Runtime.Check: what this host lacks, and how to
// fix it. Err is the underlying failure, when there is one.
type CheckError struct {
	Runtime string
	What    string
	Fix     string
	Err     error
}

func (e *CheckError) Error() string {
	s := e.Runtime + " runtime: " + e.What
	if e.Fix != "" {
		s += " (fix: " + e.Fix + ")"
	}
	return s
}

func (e *CheckError) Unwrap() error { return e.Err }

// Run makes a sandbox of spec on rt, runs cmd in it and waits for it.
func Run(ctx context.Context, rt Runtime, spec Spec, cmd *Cmd) (*Result, error) {
	s, err := rt.New(ctx, spec)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	p, err := s.Run(ctx, cmd)
	if err != nil {
		return nil, err
	}
	return p.Wait()
}
