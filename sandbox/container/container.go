// Package container is the runtime of backends podman and docker: it runs
// a Spec's command in a container of one of those engines, driven through
// the engine's own command-line client, or for docker, through its
// daemon's API (dockerapi.go; docs/backends.md says when and why).
//
// Every container gets the same shape as a native sandbox where the engine
// can give it: the base's system directories read-only (for the host base,
// a skeleton image of the host's top level with its system directories
// bound read-only), a read-only root, a size-limited /tmp, no capabilities
// and no_new_privs, the workspace read-write, read-only or as an overlay
// whose upper directory is pinfold's changeset, and tini (Debian's
// tini-static) as PID 1 so that signals and exit statuses behave as on
// the host. Each container carries a label naming the pinfold process that
// made it; Clean removes those whose process is gone.
//
// The network modes outbound and allow, and published ports, are served
// by pinfold's own network stack (the pinfold-net helper, as for a native
// sandbox) in a network namespace the container joins; the engine's
// networks are not used.
package container

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/internal/cgroup"
	"github.com/pinfold/pinfold/internal/netpolicy"
	"github.com/pinfold/pinfold/sandbox"
)

// Backend names.
const (
	PodmanName = "podman"
	DockerName = "docker"
)

// Label marks pinfold's containers: its value is "PID-STARTTIME" of the
// pinfold process that made the container.
const Label = "pinfold.run"

// Tini is where the container's init comes from on the host.
var Tini = "/usr/bin/tini-static"

// Runtime runs sandboxes as containers of one engine.
type Runtime struct {
	engine string
	store  string // pinfold's store (WithStore)

	once   sync.Once
	bin    string
	extra  []string // flags every run of this engine needs on this host
	check  error
	images sync.Map // skeleton image name -> struct{} once imported
}

// Option configures a Runtime.
type Option func(*Runtime)

// WithStore keeps what the runtime's sandboxes need of pinfold's store
// (tar, oci and debian-12 bases, the skeleton images' marks, temporary
// directories, the shared network helper's socket) in dir. Without it,
// bases come from the default store (store.DefaultDir) and temporary
// directories from the system's.
func WithStore(dir string) Option { return func(r *Runtime) { r.store = dir } }

// Podman is the podman runtime.
func Podman(opts ...Option) *Runtime { return newRuntime(PodmanName, opts) }

// Docker is the docker runtime.
func Docker(opts ...Option) *Runtime { return newRuntime(DockerName, opts) }

func newRuntime(engine string, opts []Option) *Runtime {
	r := &Runtime{engine: engine}
	for _, f := range opts {
		f(r)
	}
	return r
}

// Name returns "podman" or "docker".
func (r *Runtime) Name() string { return r.engine }

// Features says what a container gets. docker has no user namespace of
// a container's own: root inside would be host root, and capabilities
// added for a user other than root are never effective, so docker
// refuses --user root and --cap-add (see sandboxIDs).
func (r *Runtime) Features() sandbox.Features {
	userns := r.engine == PodmanName
	return sandbox.Features{
		Isolated:       true,
		Bases:          []sandbox.BaseKind{sandbox.BaseHost, sandbox.BaseDir, sandbox.BaseTar, sandbox.BaseOCI, sandbox.BaseDebian12},
		Captures:       true,
		Access:         []sandbox.Access{sandbox.AccessChangeset, sandbox.AccessReadWrite, sandbox.AccessReadOnly, sandbox.AccessNone},
		Networks:       []sandbox.Network{sandbox.NetworkNone, sandbox.NetworkHost, sandbox.NetworkOutbound, sandbox.NetworkAllow},
		ImageFiles:     true,
		Publish:        true,
		HostLoopback:   true,
		Memory:         true,
		Pids:           true,
		CPUs:           true,
		Capabilities:   userns,
		Root:           userns,
		Mounts:         true,
		WritableMounts: true,
		Hostname:       true,
		TTY:            true,
		Timeout:        true,
	}
}

// Check finds the engine's client, tini and (where crun cannot run) runc,
// and for docker that its daemon answers.
func (r *Runtime) Check(ctx context.Context, spec *sandbox.Spec) error {
	r.once.Do(func() { r.check = r.probe(ctx) })
	return r.check
}

func (r *Runtime) probe(ctx context.Context) error {
	fail := func(what, fix string, err error) error {
		return &sandbox.CheckError{Runtime: r.engine, What: what, Fix: fix, Err: err}
	}
	bin, err := exec.LookPath(r.engine)
	if err != nil {
		pkg := "podman"
		if r.engine == DockerName {
			pkg = "docker.io"
		}
		return fail(r.engine+" is not installed", "apt install "+pkg, err)
	}
	r.bin = bin
	if _, err := os.Stat(Tini); err != nil {
		return fail("tini, the containers' init, is missing ("+Tini+")", "apt install tini", err)
	}
	if r.engine == DockerName {
		// The daemon must answer; connecting to its socket tells without
		// the client's round trip (tens of milliseconds on every run).
		if err := dialDaemon(); err != nil {
			return fail("the docker daemon does not answer: "+err.Error(), "start the docker daemon: systemctl start docker, or without systemd, as root: dockerd >/var/log/dockerd.log 2>&1 &", err)
		}
	}
	// The engine's default limits may exceed what this process may set
	// (runc then refuses to start anything): pass our own.
	var nofile, nproc unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &nofile)
	unix.Getrlimit(unix.RLIMIT_NPROC, &nproc)
	np := nproc.Max
	if b, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
		var pm uint64
		if _, err := fmt.Sscan(string(b), &pm); err == nil && pm < np {
			np = pm
		}
	}
	r.extra = []string{"--ulimit", fmt.Sprintf("nofile=%d:%d", nofile.Max, nofile.Max),
		"--ulimit", fmt.Sprintf("nproc=%d:%d", np, np)}
	if r.engine == PodmanName && hybridCgroups() {
		// crun refuses hybrid cgroup hierarchies; runc runs on them.
		runc, err := exec.LookPath("runc")
		if err != nil {
			return fail("this host's cgroups are hybrid (v1 controllers and a v2 tree), which podman's default runtime crun refuses, and runc is not installed", "apt install runc", err)
		}
		r.extra = append(r.extra, "--runtime", runc)
	}
	return nil
}

// dialDaemon connects to the docker daemon's socket: DOCKER_HOST when it
// names a unix socket, else the default one. A daemon elsewhere (tcp://,
// ssh://) cannot be checked this way, nor used: the binds name this
// machine's paths.
func dialDaemon() error {
	addr := "/var/run/docker.sock"
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		p, ok := strings.CutPrefix(h, "unix://")
		if !ok {
			return fmt.Errorf("DOCKER_HOST %s is not a local unix socket: pinfold binds this machine's paths into containers", h)
		}
		addr = p
	}
	c, err := net.DialTimeout("unix", addr, 2*time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// hybridCgroups reports v1 controllers mounted beside a v2 tree.
func hybridCgroups() bool {
	var st unix.Statfs_t
	if unix.Statfs("/sys/fs/cgroup/unified", &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		return true
	}
	return false
}

// New prepares a sandbox: the base's image is made or found now, so that
// Run only starts containers.
func (r *Runtime) New(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if err := spec.Normalize(); err != nil {
		return nil, err
	}
	f := r.Features()
	if err := f.Supports(r.engine, &spec, nil); err != nil {
		return nil, err
	}
	if err := r.Check(ctx, &spec); err != nil {
		return nil, err
	}
	s := &Sandbox{rt: r, spec: spec}
	if err := s.prepare(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Sandbox is a prepared container configuration.
type Sandbox struct {
	rt    *Runtime
	spec  sandbox.Spec
	image string
	args  []string // run flags from the spec
	stty  bool     // the base has /bin/sh and stty
	net   *netpolicy.Config
	cgsys *cgroup.System // for limits, detected once
	idm   *idMounts      // the caller's directories idmapped, as root
	// userns are podman's flags of a user namespace of the container's
	// own (as root).
	userns []string
	// release lets the store's garbage collector have the base again.
	release func()
}

// Close releases the base and detaches the idmapped mounts (running
// containers keep theirs); containers go with their commands.
func (s *Sandbox) Close() error {
	if s.idm != nil {
		s.idm.release()
		s.idm = nil
	}
	if s.release != nil {
		s.release()
		s.release = nil
	}
	return nil
}

// engineError is a failure of the engine itself (its exit status 125).
type engineError struct {
	engine string
	detail string
}

func (e *engineError) Error() string {
	msg := e.engine + " could not run the container"
	if e.detail != "" {
		msg += ": " + e.detail
	}
	return msg
}

// ErrEngine is wrapped by errors that come from the engine rather than
// the command.
var ErrEngine = errors.New("container engine failed")

func (e *engineError) Unwrap() error { return ErrEngine }

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
