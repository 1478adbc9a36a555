// Package kube holds what pinfold and its Kubernetes helper (pinfold-kube,
// internal/kubehelper) share without linking client-go: the messages they
// exchange and the copying of host directories into a pod and of a pod's
// writes back into a changeset's upper directory. The runtime is sandbox/kubernetes.
//
// pinfold starts the helper once per command with the command's standard
// streams as the helper's, and a unix socket as fd 3 on which JSON lines go
// both ways: one Request, then Controls (signals, terminal sizes) from
// pinfold, and Events (started, exited, failed) from the helper. When
// pinfold goes away the socket reads end of file and the helper removes
// what it made on the cluster.
package kube

import (
	"bufio"
	"errors"
)

// HelperName is the helper's file name, looked up next to the pinfold
// binary, then on PATH (or PINFOLD_KUBE_HELPER).
const HelperName = "pinfold-kube"

// Labels on every object the helper makes.
const (
	// LabelOwner is "PID-STARTTIME" of the pinfold process that ran the
	// command (as the container runtimes' label).
	LabelOwner = "pinfold.run"
	// LabelHost is the host name of that process: pinfold clean on another
	// machine cannot tell whether it lives, and leaves the object alone.
	LabelHost = "pinfold.host"
	// LabelID names one run's objects together.
	LabelID = "pinfold.id"
)

// Mount is a host path copied into the pod.
type Mount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"ro,omitempty"`
	// File: a regular file, carried in a Secret (read-only only).
	File bool `json:"file,omitempty"`
}

// Request is one command to run in a new pod.
type Request struct {
	ID         string `json:"id"`
	Owner      string `json:"owner"`
	Host       string `json:"host"`
	Kubeconfig string `json:"kubeconfig,omitempty"`
	Namespace  string `json:"namespace,omitempty"`
	Image      string `json:"image"`
	// PullPolicy is the pod's imagePullPolicy ("" is Kubernetes' default).
	PullPolicy string `json:"pull_policy,omitempty"`
	Hostname   string `json:"hostname,omitempty"`
	UID        int64  `json:"uid"`
	GID        int64  `json:"gid"`

	Args  []string `json:"args"`
	Env   []string `json:"env"`
	Dir   string   `json:"dir"`
	Stdin bool     `json:"stdin,omitempty"`
	TTY   bool     `json:"tty,omitempty"`
	Rows  uint16   `json:"rows,omitempty"`
	Cols  uint16   `json:"cols,omitempty"`

	TimeoutMS      int64   `json:"timeout_ms,omitempty"`
	StartTimeoutMS int64   `json:"start_timeout_ms,omitempty"`
	Memory         int64   `json:"memory,omitempty"`
	CPUs           float64 `json:"cpus,omitempty"`
	TmpSize        int64   `json:"tmp_size"`

	// NetworkNone takes the pod off the network (Spec.Network none): by
	// a deny-all NetworkPolicy, which the cluster's plugin enforces, and,
	// with NetOff, by the netoff container too.
	NetworkNone bool `json:"network_none,omitempty"`
	// NetOff adds the container that takes the pod's links down (root
	// with CAP_NET_ADMIN: only a namespace at Pod Security "privileged"
	// admits it), for clusters whose plugin enforces no NetworkPolicy.
	NetOff bool `json:"net_off,omitempty"`
	// DeadlineS is the pod's activeDeadlineSeconds: the cluster ends a
	// pod its helper left behind (0: none).
	DeadlineS int64 `json:"deadline_s,omitempty"`
	// NetworkAllow limits the pod to Egress (Spec.Network allow).
	NetworkAllow bool `json:"network_allow,omitempty"`
	// Egress, for Spec.Network allow, is what the pod's NetworkPolicy lets
	// it reach; Hosts are the allowed names' addresses, given to the pod
	// as /etc/hosts entries (it has no other resolver).
	Egress []Block `json:"egress,omitempty"`
	Hosts  []Host  `json:"hosts,omitempty"`

	// Workspace is copied in at the same path; with Access "changeset" the
	// pod's writes to it come back into Upper.
	Workspace string `json:"workspace,omitempty"`
	// WorkspaceParent: the workspace's volume is mounted at its parent
	// directory and the copy is its subdirectory, so that the pod's spec
	// is the same for every workspace of that parent (a tenant's, whose
	// workspaces are fresh directories of one parent) and a warm pod
	// serves them all.
	WorkspaceParent bool    `json:"workspace_parent,omitempty"`
	Access          string  `json:"access,omitempty"`
	Upper           string  `json:"upper,omitempty"`
	Mounts          []Mount `json:"mounts,omitempty"`

	// Session, when set, makes the command a session's agent.
	Session *Session `json:"session,omitempty"`
}

// Session is what a session's pod needs besides a run's: pinfold's binary
// (the agent) copied in, a writable home and run directory, and the
// agent's socket served on the host.
//
// Its environment is not in the pod's spec (nor in a Secret): the helper
// hands it to the agent on the agent's stdin, so that a pod started before
// the session (a warm pod of a pool) is the same pod a cold start would
// make. Request.Env is then empty.
type Session struct {
	// Agent is pinfold's binary on this machine, copied into the pod at
	// AgentDir/pinfold.
	Agent string `json:"agent"`
	// Env is the session's whole environment.
	Env []string `json:"env"`
	// Sock is the unix socket on this machine the helper listens on: every
	// connection is joined to the agent's socket in the pod (an exec of
	// the agent's bridge).
	Sock string `json:"sock"`
	// Pool names the warm pool to claim a pod from ("": start one).
	Pool string `json:"pool,omitempty"`
	// PoolSock is the pool keeper's socket, told of the template used so
	// that it keeps warm pods of it.
	PoolSock string `json:"pool_sock,omitempty"`
	// AgentImage, when set, is an image holding the agent at
	// /pinfold-agent, mounted at AgentDir as an image volume: the agent is
	// then not copied in.
	AgentImage string `json:"agent_image,omitempty"`
}

// Paths in a session's pod.
const (
	// AgentDir holds pinfold's binary (an emptyDir, read-only in main).
	AgentDir = "/.pinfold/bin"
	// SessionRun and SessionHome are the agent's run directory and the
	// session's home (agent.RunDir, agent.Home; emptyDirs).
	SessionRun  = "/.pinfold/run"
	SessionHome = "/home/sandbox"
)

// Pool labels: a warm pod carries LabelPool (the pool's name) and
// LabelTemplate (the hash of its spec), and LabelReady once it can be
// claimed. A claim replaces LabelOwner with the claimer's and removes
// LabelPool, with the pod's resourceVersion as a precondition.
const (
	LabelPool     = "pinfold.pool"
	LabelTemplate = "pinfold.template"
	LabelReady    = "pinfold.ready"
)

// Block is an address range a pod may reach, less the Except ranges.
type Block struct {
	CIDR   string   `json:"cidr"`
	Except []string `json:"except,omitempty"`
}

// Host is a name and its addresses, for the pod's /etc/hosts.
type Host struct {
	Name  string   `json:"name"`
	Addrs []string `json:"addrs"`
}

// Control is a message from pinfold to the helper while the command runs.
type Control struct {
	Signal int    `json:"signal,omitempty"`
	Rows   uint16 `json:"rows,omitempty"`
	Cols   uint16 `json:"cols,omitempty"`
}

// Error kinds in Event.Error.
const (
	ErrNotFound   = "not-found"  // the command is missing
	ErrPermission = "permission" // the command is not executable
	ErrSpec       = "spec"       // the request cannot be made into a pod
	ErrCluster    = "cluster"    // the cluster failed or refused
)

// Event is a message from the helper.
type Event struct {
	// Started: the pod runs and the command is being started.
	Started bool   `json:"started,omitempty"`
	Pod     string `json:"pod,omitempty"`
	Exit    *Exit  `json:"exit,omitempty"`
	Error   string `json:"error,omitempty"`
	Kind    string `json:"kind,omitempty"`
	// Trace holds the helper's steps with their times (Spec.Trace).
	Trace []Step `json:"trace,omitempty"`
}

// Step is a point of the helper's timeline.
type Step struct {
	Step string `json:"step"`
	Mono int64  `json:"mono"`
}

// Exit is how the command ended.
type Exit struct {
	Code     int  `json:"code"`
	OOM      bool `json:"oom,omitempty"`
	TimedOut bool `json:"timed_out,omitempty"`
	// Changes counts the workspace entries written to Upper.
	Changes int `json:"changes,omitempty"`
}

// MaxLine bounds one message of the protocol. The largest, a Request,
// carries a command's arguments and environment, which the kernel bounds
// far lower (ARG_MAX); so a longer line is a confused peer, whose line is
// refused rather than held in memory.
const MaxLine = 16 << 20

// ErrLineTooLong is ReadLine's answer to a line over MaxLine.
var ErrLineTooLong = errors.New("kubernetes helper protocol: a message over 16 MiB")

// ReadLine reads the next message's line from r, with its newline.
func ReadLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > MaxLine {
			return nil, ErrLineTooLong
		}
		line = append(line, chunk...)
		if err != bufio.ErrBufferFull {
			return line, err
		}
	}
}
