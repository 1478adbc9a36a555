// Package gvisor is the runtime of backend gvisor: it runs a Spec's
// command under gVisor's runsc, whose kernel (the Sentry) serves the
// command's system calls in user space, so that the command never talks
// to the host's kernel directly. It is the stronger tier beside the
// native runtime's namespaces on the shared kernel.
//
// Each command gets an OCI bundle derived from the Spec: a skeleton root
// whose top-level directories are the base's, bound read-only (the host's
// system directories for the host base, the store's unpacked root for
// tar, oci and debian-12 bases), a tmpfs /tmp, the workspace read-write,
// read-only or as an overlay whose upper directory is the changeset, and
// the mounts. runsc runs with a user namespace that maps the sandbox's
// ids to the sandbox range (store.RootIDBase on), so its Sentry and gofer
// hold no host root, and the caller's directories are shown through
// idmapped mounts pinfold makes (the container runtime's), so what the
// command writes belongs to the workspace's owner.
//
// Limits are a host cgroup pinfold makes and names in the bundle's
// cgroupsPath, which runsc moves its Sentry and gofer into
// (limits_linux.go).
//
// Sessions (Runtime.Session, and the CLI's and API's through the engine)
// run pinfold's agent in one sandbox, its socket made on the host by
// runsc's --host-uds=create (session_linux.go).
//
// Networks other than none are pinfold's own stack on a TUN device in a
// namespace runsc joins (network_linux.go).
//
// What it cannot enforce yet is refused by its Features, never run with
// less: the host's network, capabilities, base writes.
// It runs as root only. A terminal (Cmd.TTY) is runsc's host
// pseudo-terminal, whose master end runsc hands over on a socket.
package gvisor

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/pinfold/pinfold/sandbox"
)

// Name is the runtime's backend name.
const Name = "gvisor"

// Platform is the runsc platform pinfold uses: systrap needs neither KVM
// nor ptrace, and runs in virtual machines without nested virtualisation.
const Platform = "systrap"

// RunscEnv names the environment variable that points at runsc.
const RunscEnv = "PINFOLD_RUNSC"

// Runtime runs sandboxes under runsc.
type Runtime struct {
	store string // pinfold's store (WithStore)
	once  sync.Once
	runsc string
	check error
}

// Option configures a Runtime.
type Option func(*Runtime)

// WithStore takes tar, oci and debian-12 bases from pinfold's store dir
// rather than the default one (store.DefaultDir).
func WithStore(dir string) Option { return func(r *Runtime) { r.store = dir } }

// NewRuntime returns the gvisor runtime.
func NewRuntime(opts ...Option) *Runtime {
	r := &Runtime{}
	for _, f := range opts {
		f(r)
	}
	return r
}

// Name returns "gvisor".
func (r *Runtime) Name() string { return Name }

// Features says what a gVisor sandbox gets.
func (r *Runtime) Features() sandbox.Features {
	return sandbox.Features{
		Isolated:       true,
		Bases:          []sandbox.BaseKind{sandbox.BaseHost, sandbox.BaseDir, sandbox.BaseTar, sandbox.BaseOCI, sandbox.BaseDebian12},
		Access:         []sandbox.Access{sandbox.AccessChangeset, sandbox.AccessReadWrite, sandbox.AccessReadOnly, sandbox.AccessNone},
		Networks:       []sandbox.Network{sandbox.NetworkNone, sandbox.NetworkOutbound, sandbox.NetworkAllow},
		Publish:        true,
		Scratch:        true,
		HostLoopback:   true,
		ImageFiles:     true,
		Captures:       true,
		Root:           true,
		Mounts:         true,
		WritableMounts: true,
		Hostname:       true,
		TTY:            true,
		Timeout:        true,
		Memory:         true,
		Pids:           true,
		CPUs:           true,
	}
}

// Check finds runsc and checks that pinfold runs as root.
func (r *Runtime) Check(ctx context.Context, spec *sandbox.Spec) error {
	r.once.Do(func() { r.runsc, r.check = probe() })
	return r.check
}

// Runsc returns the runsc binary Check found.
func (r *Runtime) Runsc() string { return r.runsc }

func probe() (string, error) {
	bin, err := FindRunsc()
	if err != nil {
		return "", &sandbox.CheckError{Runtime: Name, What: "runsc, gVisor's runtime, is not installed",
			Fix: "build it (CGO_ENABLED=0 go build gvisor.dev/gvisor/runsc) and set " + RunscEnv + " to it, or put it beside pinfold or on the PATH; scripts/test-setup.sh builds the pinned version", Err: err}
	}
	if os.Geteuid() != 0 {
		return "", &sandbox.CheckError{Runtime: Name, What: "the gvisor runtime runs as root only (runsc maps the sandbox's ids into the sandbox range)",
			Fix: "run pinfold as root, or use --backend native"}
	}
	return bin, nil
}

// FindRunsc looks for runsc: $PINFOLD_RUNSC, beside the running
// executable, then on the PATH.
func FindRunsc() (string, error) {
	if p := os.Getenv(RunscEnv); p != "" {
		if err := executable(p); err != nil {
			return "", err
		}
		return p, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "runsc")
		if executable(p) == nil {
			return p, nil
		}
	}
	return exec.LookPath("runsc")
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return &os.PathError{Op: "exec", Path: p, Err: errors.New("not an executable file")}
	}
	return nil
}
