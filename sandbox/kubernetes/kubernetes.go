// Package kubernetes is the runtime of backend kubernetes: each command
// runs in a pod of its own on a Kubernetes cluster, started through the
// API server, with its streams, terminal, signals and exit status carried
// by the API server's exec. client-go lives in the helper pinfold-kube
// (cmd/pinfold-kube), which this package starts for each command, so that
// pinfold itself does not link it; internal/kube is what both share.
//
// A pod is shaped like a native sandbox where Kubernetes can: the image is
// the base (oci:REF), the root file system is read-only, /tmp is a
// memory-backed emptyDir of the tmp size, the command runs as a non-root
// user with no capabilities, no privilege escalation, seccomp
// RuntimeDefault and no service account token; limits are the container's
// resources; every pod passes Pod Security "restricted". Network none is
// a deny-all NetworkPolicy, offered where the cluster's plugin enforces
// policies (Options.PolicyEnforced), else only with Options.NetOff, a
// container that takes the pod's links down (and that only a
// "privileged" namespace admits). The cluster does
// not see this machine's files: the workspace and read-only mounts are
// copied in (tar over exec), read-only files are carried in a Secret with
// the environment's values, and with the changeset access the pod's
// writes come back as the changeset's upper directory. See
// docs/kubernetes.md.
//
// A session (Runtime.Session, and pinfold's sessions through the engine)
// is a pod whose command is pinfold's session agent, copied in; the helper
// serves the agent's socket on this machine by joining each connection to
// an exec of the agent's bridge in the pod, and may claim the pod from a
// warm pool (pinfold-kube pool).
package kubernetes

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pinfold/pinfold/internal/agent"
	"github.com/pinfold/pinfold/internal/helper"
	"github.com/pinfold/pinfold/internal/kube"
	"github.com/pinfold/pinfold/internal/procstat"
	"github.com/pinfold/pinfold/sandbox"
)

// Name is the backend's name.
const Name = "kubernetes"

// Options say which cluster, and how to reach it. Empty fields come from
// the environment (see Default).
type Options struct {
	// Kubeconfig is the kubeconfig file; empty: PINFOLD_KUBECONFIG, else
	// kubectl's rules (KUBECONFIG, ~/.kube/config), else in-cluster.
	Kubeconfig string
	// Namespace holds the pods; empty: PINFOLD_KUBE_NAMESPACE, else the
	// kubeconfig context's, else "default".
	Namespace string
	// Helper is the pinfold-kube binary; empty: PINFOLD_KUBE_HELPER, else
	// next to this executable, else on PATH.
	Helper string
	// PullPolicy is the pods' imagePullPolicy: "" (Kubernetes' default),
	// Always, IfNotPresent or Never (PINFOLD_KUBE_PULL_POLICY).
	PullPolicy string
	// StartTimeout bounds the wait for a pod to run (default 2 minutes).
	StartTimeout time.Duration
	// PolicyEnforced says the cluster's network plugin enforces
	// NetworkPolicies (PINFOLD_KUBE_NETWORK_POLICY=enforced): only then
	// are network none (a deny-all policy) and allow offered, since the
	// policy is all that limits a pod that passes Pod Security
	// "restricted".
	PolicyEnforced bool
	// NetOff gives network none on a cluster whose plugin enforces no
	// policy (PINFOLD_KUBE_NETWORK_NONE=netoff): a container of the pod,
	// root with CAP_NET_ADMIN, takes its links down. Only a namespace at
	// Pod Security "privileged" admits it.
	NetOff bool
	// Deadline is the activeDeadlineSeconds of a pod without a timeout,
	// the cluster's own end for it should its helper be killed
	// (PINFOLD_KUBE_DEADLINE, a Go duration; default DefaultDeadline;
	// negative: none).
	Deadline time.Duration
	// AgentImage is an image holding the session agent at /pinfold-agent
	// (cmd/pinfold-agent, of this pinfold's version), which a session's
	// pod mounts as an image volume instead of getting the agent copied in
	// at its start (PINFOLD_KUBE_AGENT_IMAGE; a cluster with image
	// volumes, which Pod Security "restricted" admits on the kit's
	// v1.36). Its pull policy is PullPolicy's.
	AgentImage string
}

// DefaultDeadline is how long a pod without a timeout may run, sessions'
// and warm pools' included.
const DefaultDeadline = 24 * time.Hour

// Runtime runs commands in pods.
type Runtime struct {
	opt   Options
	once  sync.Once
	check error
}

// New returns a runtime with opt, its empty fields from the environment.
func New(opt Options) *Runtime {
	if opt.Kubeconfig == "" {
		opt.Kubeconfig = os.Getenv("PINFOLD_KUBECONFIG")
	}
	if opt.Namespace == "" {
		opt.Namespace = os.Getenv("PINFOLD_KUBE_NAMESPACE")
	}
	if opt.Helper == "" {
		opt.Helper = os.Getenv("PINFOLD_KUBE_HELPER")
	}
	if opt.PullPolicy == "" {
		opt.PullPolicy = os.Getenv("PINFOLD_KUBE_PULL_POLICY")
	}
	if opt.AgentImage == "" {
		opt.AgentImage = os.Getenv("PINFOLD_KUBE_AGENT_IMAGE")
	}
	if os.Getenv("PINFOLD_KUBE_NETWORK_POLICY") == "enforced" {
		opt.PolicyEnforced = true
	}
	if os.Getenv("PINFOLD_KUBE_NETWORK_NONE") == "netoff" {
		opt.NetOff = true
	}
	if opt.Deadline == 0 {
		opt.Deadline = DefaultDeadline
		if d, err := time.ParseDuration(os.Getenv("PINFOLD_KUBE_DEADLINE")); err == nil {
			opt.Deadline = d
			if d == 0 {
				opt.Deadline = -1
			}
		}
	}
	if opt.Kubeconfig != "" {
		// The helper of a session runs in another directory.
		if abs, err := filepath.Abs(opt.Kubeconfig); err == nil {
			opt.Kubeconfig = abs
		}
	}
	return &Runtime{opt: opt}
}

// AbsEnv makes a relative PINFOLD_KUBECONFIG, and the relative files of
// KUBECONFIG, absolute in this process's environment, which the
// processes it starts inherit: a session's supervisor runs in another
// directory than the command that started it. Front ends call it first.
func AbsEnv() {
	if kc := os.Getenv("PINFOLD_KUBECONFIG"); kc != "" && !filepath.IsAbs(kc) {
		if abs, err := filepath.Abs(kc); err == nil {
			os.Setenv("PINFOLD_KUBECONFIG", abs)
		}
	}
	if kc := os.Getenv("KUBECONFIG"); kc != "" {
		parts := filepath.SplitList(kc)
		for i, p := range parts {
			if p != "" && !filepath.IsAbs(p) {
				if abs, err := filepath.Abs(p); err == nil {
					parts[i] = abs
				}
			}
		}
		os.Setenv("KUBECONFIG", strings.Join(parts, string(filepath.ListSeparator)))
	}
}

// Default is the runtime configured by the environment alone.
func Default() *Runtime { return New(Options{}) }

// Name returns "kubernetes".
func (r *Runtime) Name() string { return Name }

// Features says what a pod gets. Not there: the host's own bases (the
// node has the image's files, not this machine's), read-write access to
// the workspace and read-write mounts (the pod writes a copy: use the
// changeset access, whose writes come back), published ports and the
// network modes of pinfold's stack, a pids limit (a node setting in
// Kubernetes), root and capabilities.
func (r *Runtime) Features() sandbox.Features {
	var nets []sandbox.Network
	if r.opt.PolicyEnforced || r.opt.NetOff {
		nets = append(nets, sandbox.NetworkNone)
	}
	if r.opt.PolicyEnforced {
		nets = append(nets, sandbox.NetworkAllow)
	}
	netFix := "network allow needs a network plugin that enforces NetworkPolicies (Calico, Cilium...): say it does with PINFOLD_KUBE_NETWORK_POLICY=enforced; network outbound, host and published ports are not offered on kubernetes"
	if !r.opt.PolicyEnforced && !r.opt.NetOff {
		netFix = "network none on kubernetes is a deny-all NetworkPolicy: on a cluster whose network plugin enforces NetworkPolicies (Calico, Cilium...), set PINFOLD_KUBE_NETWORK_POLICY=enforced; " +
			"where none enforces them, PINFOLD_KUBE_NETWORK_NONE=netoff takes the pod's links down with a container that has CAP_NET_ADMIN, which only a namespace at Pod Security \"privileged\" admits (docs/kubernetes.md)"
	}
	return sandbox.Features{
		Fixes: map[string]string{
			"base": "give a registry image the cluster can pull: --base oci:REF (this machine's own bases, host, debian-12, dir:, tar: and image files, are not on the cluster's nodes; " +
				"pinfold pack writes an image to push)",
			"network": netFix,
		},
		Isolated: true,
		Bases:    []sandbox.BaseKind{sandbox.BaseOCI},
		Access:   []sandbox.Access{sandbox.AccessChangeset, sandbox.AccessReadOnly, sandbox.AccessNone},
		Networks: nets,
		Memory:   true,
		CPUs:     true,
		Mounts:   true,
		Hostname: true,
		TTY:      true,
		Timeout:  true,
	}
}

// helper finds pinfold-kube.
func (r *Runtime) helper() (string, error) {
	if r.opt.Helper != "" {
		return r.opt.Helper, nil // PINFOLD_KUBE_HELPER, read by New
	}
	return helper.Find(kube.HelperName, "")
}

// Check finds the helper and asks it whether the cluster answers and the
// namespace's pods can be listed.
func (r *Runtime) Check(ctx context.Context, spec *sandbox.Spec) error {
	r.once.Do(func() { r.check = r.probe(ctx) })
	return r.check
}

func (r *Runtime) probe(ctx context.Context) error {
	bin, err := r.helper()
	if err != nil {
		return &sandbox.CheckError{Runtime: Name, What: "the Kubernetes helper " + kube.HelperName + " is not installed",
			Fix: "install pinfold-kube next to pinfold (scripts/setup.sh --all does), or set PINFOLD_KUBE_HELPER", Err: err}
	}
	r.opt.Helper = bin
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, bin, "check")
	c.Env = r.helperEnv()
	out, _ := c.Output()
	var res struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &res); err != nil || !res.OK {
		what := res.Error
		if what == "" {
			what = fmt.Sprintf("the helper's check failed: %v %q", err, out)
		}
		return &sandbox.CheckError{Runtime: Name, What: "the cluster cannot be used: " + what,
			Fix: "point PINFOLD_KUBECONFIG at a kubeconfig whose user may manage pods, pods/exec, secrets and networkpolicies in the namespace (PINFOLD_KUBE_NAMESPACE)"}
	}
	return nil
}

func (r *Runtime) helperEnv() []string {
	env := os.Environ()
	if r.opt.Kubeconfig != "" {
		env = append(env, "PINFOLD_KUBECONFIG="+r.opt.Kubeconfig)
	}
	if r.opt.Namespace != "" {
		env = append(env, "PINFOLD_KUBE_NAMESPACE="+r.opt.Namespace)
	}
	return env
}

// New checks spec and keeps it; each Run makes a pod.
func (r *Runtime) New(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if err := spec.Normalize(); err != nil {
		return nil, err
	}
	f := r.Features()
	if err := f.Supports(Name, &spec, nil); err != nil {
		return nil, err
	}
	if err := validHostname(spec.Hostname); err != nil {
		return nil, &sandbox.SpecError{Field: "hostname", Err: err}
	}
	if err := r.Check(ctx, &spec); err != nil {
		return nil, err
	}
	return &Sandbox{rt: r, spec: spec}, nil
}

// validHostname accepts what a pod's hostname may be (a DNS label).
func validHostname(h string) error {
	if len(h) == 0 || len(h) > 63 {
		return fmt.Errorf("a pod's hostname is 1 to 63 characters: %q", h)
	}
	for i, c := range h {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0 && i < len(h)-1) {
			return fmt.Errorf("a pod's hostname is a DNS label (a-z, 0-9, '-'): %q", h)
		}
	}
	return nil
}

// Sandbox is a checked spec.
type Sandbox struct {
	rt   *Runtime
	spec sandbox.Spec
}

// Close has nothing to release: pods go with their commands.
func (s *Sandbox) Close() error { return nil }

// ids returns the user the pod's command runs as: the workspace's owner,
// else this process's user, and never root (runAsNonRoot): root's files
// are written as nobody (65534).
func (s *Sandbox) ids() (int64, int64) {
	uid, gid := int64(os.Getuid()), int64(os.Getgid())
	if s.spec.Workspace != "" {
		if fi, err := os.Stat(s.spec.Workspace); err == nil {
			st := fi.Sys().(*syscall.Stat_t)
			uid, gid = int64(st.Uid), int64(st.Gid)
		}
	}
	if uid == 0 {
		uid, gid = 65534, 65534
	}
	return uid, gid
}

// request is the helper's request for cmd.
func (s *Sandbox) request(ctx context.Context, cmd *sandbox.Cmd) (*kube.Request, error) {
	sp := &s.spec
	host, _ := os.Hostname()
	uid, gid := s.ids()
	env := cmd.Env
	if env == nil {
		env = sandbox.DefaultEnv(sp, cmd.TTY)
	}
	dir := cmd.Dir
	if dir == "" {
		dir = sp.Workspace
	}
	r := &kube.Request{ID: randomID(), Owner: Owner(), Host: host, Kubeconfig: s.rt.opt.Kubeconfig, Namespace: s.rt.opt.Namespace,
		Image: sp.Base.Ref, PullPolicy: s.rt.opt.PullPolicy, Hostname: sp.Hostname, UID: uid, GID: gid,
		Args: cmd.Args, Env: env, Dir: dir, Stdin: cmd.Stdin != nil, TTY: cmd.TTY, Rows: cmd.Rows, Cols: cmd.Cols,
		TimeoutMS: cmd.Timeout.Milliseconds(), StartTimeoutMS: s.rt.opt.StartTimeout.Milliseconds(),
		Memory: sp.Limits.Memory, CPUs: sp.Limits.CPUs, TmpSize: sp.Limits.TmpSize,
		NetworkNone: sp.Network == sandbox.NetworkNone, Workspace: sp.Workspace, Access: string(sp.Access)}
	r.NetOff = r.NetworkNone && s.rt.opt.NetOff && !s.rt.opt.PolicyEnforced
	if d := s.rt.opt.Deadline; d > 0 {
		r.DeadlineS = int64((d + time.Second - 1) / time.Second)
	}
	if sp.Access == sandbox.AccessNone {
		r.Workspace = ""
	}
	if sp.Network == sandbox.NetworkAllow {
		r.NetworkAllow = true
		var err error
		if r.Egress, r.Hosts, err = egress(ctx, &sp.Net); err != nil {
			return nil, err
		}
	}
	if sp.Access == sandbox.AccessChangeset {
		r.Upper = sp.Changeset.Upper
	}
	if isAgent(cmd) {
		// A session's agent: its environment goes to the agent, not into
		// the pod (see kube.Session).
		r.Session = &kube.Session{Env: env, Pool: os.Getenv("PINFOLD_KUBE_POOL"), PoolSock: os.Getenv("PINFOLD_KUBE_POOL_SOCKET"),
			AgentImage: s.rt.opt.AgentImage}
		r.Env = nil
	}
	for _, m := range sp.Mounts {
		if r.Session != nil {
			// The session's own mounts (internal/session.Resolve) are the
			// pod's: pinfold's binary is copied in, the run directory and
			// home are emptyDirs, and the host's run directory gets the
			// socket the helper joins to the agent's.
			switch m.Target {
			case agent.AgentPath:
				r.Session.Agent = m.Source
				continue
			case agent.RunDir:
				r.Session.Sock = filepath.Join(m.Source, agent.SockName)
				continue
			case agent.Home:
				continue
			}
		}
		fi, err := os.Stat(m.Source)
		if err != nil {
			return nil, &sandbox.SpecError{Field: "mount", Err: err}
		}
		if !fi.IsDir() && !fi.Mode().IsRegular() {
			return nil, &sandbox.SpecError{Field: "mount", Err: fmt.Errorf("%s: only directories and regular files are copied into a pod", m.Source)}
		}
		r.Mounts = append(r.Mounts, kube.Mount{Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly, File: !fi.IsDir()})
	}
	if r.Session != nil && r.Workspace != "" {
		// A tenant's workspace of pinfold serve (TENANTS/T/ws-...): its
		// pod mounts the tenant's directory, the same for all its
		// sessions, so that warm pods serve them.
		if t := os.Getenv("PINFOLD_KUBE_TENANTS"); t != "" && filepath.Dir(filepath.Dir(r.Workspace)) == filepath.Clean(t) {
			r.WorkspaceParent = true
		}
	}
	if r.Session != nil && (r.Session.Agent == "" || r.Session.Sock == "") {
		return nil, &sandbox.SpecError{Field: "session", Err: errors.New("a session's agent needs pinfold's binary and a run directory mounted")}
	}
	return r, nil
}

// isAgent reports whether cmd is a session's agent (pinfold's binary at
// agent.AgentPath running agent.AgentCommand).
func isAgent(cmd *sandbox.Cmd) bool {
	return len(cmd.Args) >= 2 && cmd.Args[0] == agent.AgentPath && cmd.Args[1] == agent.AgentCommand
}

func randomID() string {
	b := make([]byte, 5)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Owner is this process's label value: its pid and start time.
func Owner() string {
	return fmt.Sprintf("%d-%d", os.Getpid(), procstat.StartTime(os.Getpid()))
}

// Leftovers lists the objects (kind/name) that runs of pinfold processes
// of this host left on the cluster when they were killed.
func (r *Runtime) Leftovers(ctx context.Context) ([]string, error) {
	return r.leftovers(ctx, "leftovers")
}

var _ sandbox.Cleaner = (*Runtime)(nil)

// Clean removes what Leftovers lists and returns it ("kubernetes
// pod/NAME"). Without a configured cluster (Configured; no helper)
// there is nothing to clean.
func (r *Runtime) Clean(ctx context.Context) ([]string, error) {
	if !r.Configured() {
		return nil, nil
	}
	left, err := r.leftovers(ctx, "clean")
	for i := range left {
		left[i] = Name + " " + left[i]
	}
	return left, err
}

// Configured reports whether a cluster is configured for pinfold: a
// kubeconfig named, or pinfold itself running in a pod.
func (r *Runtime) Configured() bool {
	return r.opt.Kubeconfig != "" || os.Getenv("KUBECONFIG") != "" || os.Getenv("KUBERNETES_SERVICE_HOST") != ""
}

func (r *Runtime) leftovers(ctx context.Context, op string) ([]string, error) {
	bin, err := r.helper()
	if err != nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, bin, op)
	c.Env = r.helperEnv()
	var errb bytes.Buffer
	c.Stderr = &errb
	out, err := c.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %v: %s", kube.HelperName, op, err, strings.TrimSpace(errb.String()))
	}
	var left []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" {
			left = append(left, l)
		}
	}
	return left, nil
}

// errHelper is a helper that ended without saying why.
var errHelper = errors.New("the kubernetes helper ended without a result")
