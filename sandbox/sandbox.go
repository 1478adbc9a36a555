// Package sandbox is pinfold's library for running commands in sandboxes.
// It defines what a sandbox is (Spec), what runs in it (Cmd) and how that
// ended (Result), and the small interface every runtime implements:
//
//	Runtime  ->  Sandbox  ->  Process
//	New(Spec)    Run(Cmd)     Wait, Signal, Resize
//
// The runtimes live in their own packages: sandbox/native (pinfold's own
// namespaces: no daemon, no container engine), sandbox/host (no sandbox at
// all, for commands a policy lets run on the host), sandbox/container
// (podman and docker). A Runtime's Features say what it can enforce; a
// Spec that asks for more is refused by New with an *UnsupportedError,
// never run with less.
//
// A Sandbox is a template made by New from a Spec; every Run starts the
// command in a fresh instance of it, so nothing one command does to /tmp or
// its processes is seen by the next:
//
//	rt := native.NewRuntime()
//	sb, err := rt.New(ctx, sandbox.Spec{Workspace: dir})
//	if err != nil { ... }
//	defer sb.Close()
//	p, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"make", "test"}, Stdout: os.Stdout})
//	if err != nil { ... }
//	res, err := p.Wait()
//
// A Spec describes only the sandbox. What a runtime keeps between
// sandboxes (tar, oci and debian-12 bases unpacked once, the shared
// network helper) lives in pinfold's store, which is the runtime's own
// option (native.WithStore and the like; the default store without it).
//
// A runtime that can keep a sandbox up between commands implements
// Sessioner (sandbox/native does): its Session's commands share one
// sandbox's /tmp, home, processes and writes, stream their input and
// output, and its ForwardPort reaches the sandbox's loopback. RunScript
// runs a program given as text with an interpreter, in any Sandbox.
package sandbox

import (
	"errors"
	"io"
	"syscall"
	"time"
)

// BaseKind names where a sandbox's root filesystem comes from.
type BaseKind string

const (
	// BaseHost is a read-only view of the host's system directories (/usr,
	// /etc, /opt and the /bin, /lib links), without home directories,
	// /root, /run, /var or /sys.
	BaseHost BaseKind = "host"
	// BaseDir uses a directory as the root, read-only.
	BaseDir BaseKind = "dir"
	// BaseTar uses a tarball (.tar, gzip, bzip2, xz or zstd), extracted once
	// into the store and reused.
	BaseTar BaseKind = "tar"
	// BaseDebian12 is pinfold's curated Debian 12 base, built into the
	// store with debootstrap (store.BuildCurated) before first use.
	BaseDebian12 BaseKind = "debian-12"
	// BaseOCI is a container image: an OCI layout directory, or a
	// docker-archive or oci-archive tarball (podman save, docker save),
	// unpacked once into the store; or, with Path empty, the registry
	// reference Ref, pulled into the store first.
	BaseOCI BaseKind = "oci"
)

// Base is the root filesystem of a sandbox.
type Base struct {
	Kind BaseKind
	Path string // for BaseDir, BaseTar and BaseOCI
	Ref  string // BaseOCI: which image of the file ("" for the only one)
}

// Access is what the command may do to the workspace.
type Access string

const (
	// AccessChangeset shows the workspace through an overlay: the command
	// reads it as it is and every write lands in Spec.Changeset's Upper,
	// leaving the workspace untouched until the changes are applied.
	AccessChangeset Access = "changeset"
	AccessReadWrite Access = "rw"
	AccessReadOnly  Access = "ro"
	AccessNone      Access = "none"
)

// Capture keeps the writes to a host directory aside: the command sees
// Path (at the same path inside) and every write lands in Upper. Work is
// overlayfs's scratch directory, empty, on the same filesystem as Upper.
// When pinfold runs as root, New gives Upper, Work and their common
// parent to the sandbox's ids.
type Capture struct {
	Path, Upper, Work string
}

// Network selects the sandbox's network.
type Network string

const (
	// NetworkNone gives the sandbox its own network namespace with only
	// loopback up.
	NetworkNone Network = "none"
	// NetworkHost shares the host's network namespace.
	NetworkHost Network = "host"
	// NetworkOutbound reaches everything outside through pinfold's
	// userspace network stack; nothing reaches in but published ports.
	NetworkOutbound Network = "outbound"
	// NetworkAllow reaches only the names and addresses NetPolicy.Allow
	// lists, enforced by that stack and pinfold's DNS server.
	NetworkAllow Network = "allow"
)

// NetPolicy refines the network of a sandbox (see docs/network.md).
type NetPolicy struct {
	// Allow lists names ("example.org"), wildcards ("*.example.org"),
	// addresses and CIDRs the sandbox may reach with NetworkAllow.
	Allow []string
	// Deny entries win over Allow, in every mode with pinfold's stack.
	Deny []string
	// HostLoopback makes 10.0.2.2 (fd70:66::2) inside reach the host's
	// 127.0.0.1 (::1).
	HostLoopback bool
	// Publish forwards host ports to sandbox ports:
	// "[HOSTADDR:]HOSTPORT:PORT", host address 127.0.0.1 by default.
	Publish []string
	// DNS are the upstream resolvers ("ADDR[:PORT]"); empty means the
	// host's /etc/resolv.conf.
	DNS []string
	// Log receives each violation as a JSON line when it happens.
	Log io.Writer
}

// Violation is one name or connection the network policy blocked (or,
// with Kind "network", why the sandbox had no network at all).
type Violation struct {
	Time   time.Time `json:"time"`
	Kind   string    `json:"kind"` // dns, tcp, udp, icmp or network
	Name   string    `json:"name,omitempty"`
	Addr   string    `json:"addr,omitempty"` // address:port, or the address for icmp
	Rule   string    `json:"rule,omitempty"` // the Deny entry that matched
	Reason string    `json:"reason"`
	Count  int       `json:"count"`
}

// What names the blocked target for a summary line.
func (v *Violation) What() string {
	switch {
	case v.Name != "" && v.Addr != "":
		return v.Name + " (" + v.Addr + ")"
	case v.Name != "":
		return v.Name
	}
	return v.Addr
}

// Mount binds a host path into the sandbox.
type Mount struct {
	Source   string // host path
	Target   string // absolute path inside
	ReadOnly bool
}

// Limits bound what one command may use. Zero values mean no limit,
// except TmpSize, which defaults to DefaultTmpSize.
type Limits struct {
	Memory  int64   // bytes of memory (and swap) for everything in the sandbox
	Pids    int64   // processes and threads
	CPUs    float64 // CPU time, in CPUs
	TmpSize int64   // bytes in /tmp
}

// DefaultTmpSize is the size of /tmp when Limits.TmpSize is zero.
const DefaultTmpSize = 1 << 30

// DefaultHostname is the hostname inside when Spec.Hostname is empty.
const DefaultHostname = "sandbox"

// Spec describes a sandbox.
type Spec struct {
	Base Base // zero value: the host base
	// Workspace is a host directory mounted at the same path inside.
	// Empty means no workspace.
	Workspace string
	// Access is what the command may do to the workspace. Its zero value
	// is AccessReadWrite, not the CLI's changeset: a changeset needs the
	// upper and work directories of Changeset, which the caller makes
	// (pinfold's engine does). For a command you do not trust, set
	// AccessReadOnly, or AccessChangeset with Changeset.
	Access Access
	// Changeset receives the workspace's writes with AccessChangeset
	// (its Path is ignored).
	Changeset *Capture
	// Captures are more host directories whose writes are kept aside.
	Captures []Capture
	// Scratch is a host directory mounted at /tmp instead of a tmpfs of
	// Limits.TmpSize, so that what /tmp holds counts against that
	// directory's filesystem (pinfold's --disk volume). Empty: the tmpfs.
	Scratch string
	// BaseWrites makes the base writable, to build an image from it: the
	// writes to each of the base's top-level directories land in
	// BaseWrites/<name>/upper (overlayfs; the layer of the new image).
	// Host bases cannot be written.
	BaseWrites string
	Mounts     []Mount
	Hostname   string
	Network    Network // default NetworkNone
	Net        NetPolicy
	// Root runs the command as root inside the user namespace (uid 0,
	// still without capabilities unless granted). Otherwise the command
	// runs with the invoking user's ids.
	Root bool
	// Capabilities are granted to the command, by name ("CAP_NET_RAW" or
	// "net_raw"). Capabilities only ever apply inside the sandbox's user
	// namespace.
	Capabilities []string
	Limits       Limits
	// Trace records a timeline of how each instance started, returned in
	// Result.Trace (for benchmarks and diagnosis).
	Trace bool
}

// Cmd is one command to run in a sandbox.
type Cmd struct {
	Args []string
	// Env is the command's whole environment. Nil means DefaultEnv.
	Env []string
	// Dir is the working directory inside. Empty means the workspace, or
	// "/" without one.
	Dir string
	// Stdin, Stdout and Stderr connect the command's standard streams. An
	// *os.File may be handed to the command as it is; other readers and
	// writers are copied; nil connects /dev/null.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// TTY runs the command on a new pseudo-terminal of size Rows x Cols:
	// Stdin feeds the terminal and Stdout receives what it shows (Stderr
	// is not used: a terminal has one output).
	TTY        bool
	Rows, Cols uint16
	// Timeout kills the sandbox after this long. Zero means no limit.
	Timeout time.Duration
}

// Reason says why a command ended.
type Reason string

const (
	ReasonExited   Reason = "exited"
	ReasonSignaled Reason = "signaled"
	ReasonTimeout  Reason = "timeout"
	ReasonOOM      Reason = "out-of-memory"
	ReasonKilled   Reason = "killed"
)

// Limit names used in Result.LimitsHit.
const (
	LimitMemory  = "memory"
	LimitPids    = "pids"
	LimitTmp     = "tmp"
	LimitTimeout = "timeout"
)

// Result is how a command ended.
type Result struct {
	// ExitCode is the command's exit status, 128+N when signal N killed
	// it, or 124 when the timeout fired.
	ExitCode int
	Signal   syscall.Signal // the signal that killed the command, if any
	Reason   Reason
	Duration time.Duration
	// LimitsHit names the limits the command ran into.
	LimitsHit []string
	// Limits are the limits it ran with, for messages.
	Limits  Limits
	Timeout time.Duration
	// Trace is the timeline of the instance when Spec.Trace was set.
	Trace []TracePoint
	// Violations are what the network policy blocked.
	Violations []Violation
}

// TracePoint is one step of a sandbox's start, at a CLOCK_MONOTONIC time.
type TracePoint struct {
	Step string
	Mono int64 // nanoseconds
}

// ExitCodeTimeout is Result.ExitCode when Cmd.Timeout fired.
const ExitCodeTimeout = 124

// ExecError reports a command that could not be executed inside the
// sandbox: it is missing (errors.Is(err, fs.ErrNotExist)) or not
// executable (errors.Is(err, fs.ErrPermission)).
type ExecError struct {
	Name string
	Err  error
}

func (e *ExecError) Error() string { return "executing " + e.Name + ": " + e.Err.Error() }
func (e *ExecError) Unwrap() error { return e.Err }

// SpecError reports a part of a Spec (or a Cmd) that cannot be used.
// Field is "base", "workspace", "mount", "network", "capabilities",
// "limits", "store" or "workdir".
type SpecError struct {
	Field string
	Err   error
}

func (e *SpecError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *SpecError) Unwrap() error { return e.Err }

// ErrClosed is returned by Run on a closed Sandbox.
var ErrClosed = errors.New("sandbox is closed")
