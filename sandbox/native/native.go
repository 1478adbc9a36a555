// Package native is pinfold's own sandbox runtime: new user, mount, pid,
// ipc, uts, cgroup and (unless the network is the host's) network
// namespaces, a read-only root built from a base, the workspace mounted at
// its own path, no capabilities, no_new_privs, a seccomp filter, and
// cgroup limits. It needs no daemon and no container engine.
//
// A Sandbox is a template made by New from a Spec; every Run starts the
// command in a fresh instance of it:
//
//	sb, err := native.New(ctx, sandbox.Spec{Workspace: dir})
//	if err != nil { ... }
//	defer sb.Close()
//	p, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"make", "test"}, Stdout: os.Stdout})
//	if err != nil { ... }
//	res, err := p.Wait()
//
// WithPool keeps instances built ahead of time so that Run only has to
// start the command. Runtime wraps New as a sandbox.Runtime.
package native

import (
	"context"

	"github.com/pinfold/pinfold/sandbox"
)

// Name is the native runtime's backend name.
const Name = "native"

// Runtime is the native sandbox.Runtime.
type Runtime struct {
	opts []Option
}

// NewRuntime returns the native runtime; its sandboxes are made with opts.
func NewRuntime(opts ...Option) *Runtime { return &Runtime{opts: opts} }

// Name returns "native".
func (r *Runtime) Name() string { return Name }

// Features says what the native runtime enforces: everything a Spec can
// ask for.
func (r *Runtime) Features() sandbox.Features {
	return sandbox.Features{
		Isolated:   true,
		Bases:      []sandbox.BaseKind{sandbox.BaseHost, sandbox.BaseDir, sandbox.BaseTar, sandbox.BaseOCI, sandbox.BaseDebian12},
		Access:     []sandbox.Access{sandbox.AccessChangeset, sandbox.AccessReadWrite, sandbox.AccessReadOnly, sandbox.AccessNone},
		Networks:   []sandbox.Network{sandbox.NetworkNone, sandbox.NetworkHost, sandbox.NetworkOutbound, sandbox.NetworkAllow},
		ImageFiles: true, Publish: true, HostLoopback: true, Captures: true, Memory: true, Pids: true, CPUs: true,
		Scratch: true, BaseWrites: true, Capabilities: true, Root: true, Mounts: true, WritableMounts: true,
		Hostname: true, TTY: true, Timeout: true,
	}
}

// New makes a native sandbox of spec (see New).
func (r *Runtime) New(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	s, err := New(ctx, spec, r.opts...)
	if err != nil {
		return nil, err
	}
	return s, nil
}
