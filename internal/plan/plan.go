// Package plan resolves what a user asked for (flags, pinfold.yaml,
// defaults, the environment) into a Plan: the single description of an
// execution that a backend runs and `pinfold plan` prints. Resolving is
// pure: no file system or process access beyond what the caller hands in
// (Request.Stat, Request.Getenv), so every decision is testable.
package plan

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pinfold/pinfold/internal/config"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/units"
	"github.com/pinfold/pinfold/sandbox"

	"github.com/pinfold/pinfold/internal/netpolicy"
)

// Plan is a fully resolved execution.
type Plan struct {
	Mode    string // "sandbox" or "host"
	Backend string // "native", "host" or "auto" until a backend is chosen
	// BackendReason says why this backend (set when auto chose it).
	BackendReason string
	Sandbox       sandbox.Spec
	Command       Command
	TTY           bool
	// Interactive keeps the command's stdin attached.
	Interactive bool
	Timeout     time.Duration
	Hooks       []Hook
	Caches      []Cache
	Secrets     []Secret
	// Captures are host directories besides the workspace whose writes go
	// to the changeset.
	Captures []string
	// Capabilities name what the base must provide (postgres...), as
	// set; Auto lets pinfold infer more (see internal/capability).
	Capabilities []string
	Auto         bool
	// Changeset is the open changeset to run on top of (--changeset), or "".
	Changeset string
	// Apply applies the changeset when the command succeeds (--apply).
	Apply bool
	// Disk caps what a run may write into its changeset and /tmp, in
	// bytes (--disk, limits.disk); 0 means no cap.
	Disk int64
	// HostAllow are the globs a command must match to run with backend
	// host; HostBlocked the variables stripped from its environment.
	HostAllow   []string
	HostBlocked []string
	Audit       Audit
	// Refused says why run would refuse the plan; only pinfold plan,
	// which shows a refused plan, sets it.
	Refused string
	// Image is what the base image must satisfy before it is used.
	Image ImagePolicy
	// Dispatched says the config has dispatch rules: another command
	// could get another plan.
	Dispatched bool
	// Sources says where each setting came from, by setting name.
	Sources map[string]string
	// Pack is the config's pack: section (pinfold pack's entrypoint, cmd
	// and tag), nil when it has none.
	Pack *config.Pack `json:"-"`
	// System is what the sandbox's root is made of, for bases pinfold
	// builds: Resolve leaves it nil; the engine's resolve fills it from the
	// store and the workspace.
	System *System
	// Layers are the native runtime's layers of isolation on this host
	// ("namespaces", "seccomp", "landlock (ABI 7)"): the engine's resolve
	// fills them for the native backend.
	Layers []string
}

// System is a sandbox's root as the store knows it.
type System struct {
	// BaseID names the base's content ("" when it is not in the store
	// yet: the first run builds or imports it).
	BaseID string `json:"base_id"`
	// Capabilities are the ones the sandbox gets, inferred ones included;
	// Findings say where each comes from.
	Capabilities []string  `json:"capabilities"`
	Findings     []Finding `json:"findings"`
	// Packages are what the capabilities install on the base.
	Packages []string `json:"packages"`
	// SandboxID names the image of the base with the capabilities.
	SandboxID string `json:"sandbox_id"`
	// Image is that image's directory when it is built ("" when the first
	// run builds it), ImageCreated when.
	Image        string `json:"image,omitempty"`
	ImageCreated string `json:"image_created,omitempty"`
}

// Finding is why a sandbox has a capability.
type Finding struct {
	Capability string `json:"capability"`
	Source     string `json:"source"` // explicit, lockfile, elf
	Evidence   string `json:"evidence"`
}

// ChangesetRoots are the host directories whose writes the run keeps as
// a changeset, the workspace first when its access is changeset.
// HostUnenforced lists, for a plan that runs on the host (backend host),
// the limits it asks for that the host cannot enforce (memory, pids and
// cpus need the sandbox's cgroup; the timeout is enforced), each with
// where it came from, flags and pinfold.yaml alike: such a plan is
// refused rather than run without them.
func (p *Plan) HostUnenforced() []string {
	if p.Mode != "host" {
		return nil
	}
	l := p.Sandbox.Limits
	var out []string
	add := func(set bool, name, value string) {
		if set {
			out = append(out, name+" "+value+" ("+p.Sources["limits."+name]+")")
		}
	}
	add(l.Memory > 0, "memory", units.FormatSize(l.Memory))
	add(l.Pids > 0, "pids", strconv.FormatInt(l.Pids, 10))
	add(l.CPUs > 0, "cpus", strconv.FormatFloat(l.CPUs, 'g', -1, 64))
	return out
}

func (p *Plan) ChangesetRoots() []string {
	var roots []string
	if p.Sandbox.Access == sandbox.AccessChangeset {
		roots = append(roots, p.Sandbox.Workspace)
	}
	return append(roots, p.Captures...)
}

// Command is what runs.
type Command struct {
	Args []string
	Env  []EnvVar
	Dir  string
}

// EnvVar is one environment variable and where it came from.
type EnvVar struct {
	Name, Value, From string
	// Secret marks a value taken from the host whose name looks like a
	// credential; printed plans mask it.
	Secret bool
}

// Hook is a host-side command run before the command.
type Hook struct {
	Args  []string `json:"args"` // argv; a string hook is ["/bin/sh", "-c", text]
	From  string   `json:"from"`
	Shell string   `json:"shell,omitempty"` // the text of a string hook, for printing
}

// Cache is a named directory of pinfold's store mounted read-write.
type Cache struct {
	Name   string `json:"name"`
	Source string `json:"source"`
	Target string `json:"target"`
	From   string `json:"from"`
}

// Secret is a host file mounted read-only; its content is never read by
// resolving or printing.
type Secret struct {
	Name   string `json:"name"`
	Source string `json:"source"`
	Target string `json:"target"`
	Env    string `json:"env,omitempty"`
	From   string `json:"from"`
}

// ImagePolicy is what a registry image (oci:REF) must satisfy.
type ImagePolicy struct {
	// RequirePinned refuses a reference by tag (require_pinned_image).
	RequirePinned bool `json:"require_pinned"`
	// Verify checks a cosign signature of the image against Keys before
	// it is used (verify_signature); the run then uses the verified
	// digest.
	Verify bool     `json:"verify_signature"`
	Keys   []string `json:"trusted_keys,omitempty"` // absolute paths
}

// Trust levels of a base (Audit.TrustLevel).
const (
	TrustHost     = "host"              // the host's own system directories
	TrustLocal    = "local-build"       // built or unpacked by pinfold from local input (debian-12, dir, tar, an image file)
	TrustPinned   = "pinned-digest"     // a registry image named by its manifest digest
	TrustMutable  = "mutable-reference" // a registry image named by a tag, which may name other content later
	TrustVerified = "verified-signature"
)

// Audit is what a reviewer of the run wants to know.
type Audit struct {
	Config string `json:"config"` // the pinfold.yaml used, or ""
	// ConfigIgnored is the pinfold.yaml discovery passed over as
	// untrusted, and why ("" for none).
	ConfigIgnored string `json:"config_ignored,omitempty"`
	Profile       string `json:"profile"`  // the profile applied, or ""
	Rule          string `json:"rule"`     // the dispatch rule that chose it, as written, with its position
	Role          string `json:"role"`     // install, run or build
	Lockfile      string `json:"lockfile"` // what the lockfile check found
	Trust         string `json:"trust"`    // what was verified about the base
	// TrustLevel is one of the Trust* constants; verified-signature is
	// set by the engine once a signature checked out.
	TrustLevel string `json:"trust_level"`
}

// Environ returns the environment as NAME=value strings.
func (c *Command) Environ() []string {
	env := make([]string, len(c.Env))
	for i, v := range c.Env {
		env[i] = v.Name + "=" + v.Value
	}
	return env
}

// Flags are the values given on a command line, as typed. Empty strings
// and nil slices mean "not given".
type Flags struct {
	Base, Access, Workspace, Workdir, User, Hostname, Network, Backend string
	Memory, Pids, CPUs, Timeout, TmpSize, Disk, Changeset              string
	Mounts, Env, CapAdd, Capture                                       []string
	Allow, Deny, Publish, DNS                                          []string
	TTY, Interactive, Apply, HostLoopback                              bool
	// RequirePinnedImage and VerifyKeys (each implies verify_signature).
	RequirePinnedImage bool
	VerifyKeys         []string
}

// Request is everything Resolve looks at.
type Request struct {
	Args  []string
	Flags Flags
	// Config is the pinfold.yaml in effect, or nil.
	Config *config.File
	// Cwd is the current directory with symlinks resolved.
	Cwd string
	// Home is the invoking user's home directory, for "~/" in the config.
	Home string
	// Store is pinfold's store directory (caches live there).
	Store string
	// Getenv looks up the host environment (for --env NAME and env.pass).
	Getenv func(string) (string, bool)
	// Environ is the whole host environment (for env.pass globs and the
	// host backend).
	Environ []string
	// Exists reports whether a file exists (lockfile checks).
	Exists func(path string) bool
	// Term is the host's TERM, used for terminals.
	Term string
}

// Sources of settings.
const (
	FromDefault = "default"
	FromFlag    = "flag"
	FromCwd     = "current directory"
	FromHost    = "host environment"
)

// Resolve turns a request into a Plan.
func Resolve(r *Request) (*Plan, error) {
	if len(r.Args) == 0 {
		return nil, usage("no command given", "pinfold run [flags] -- COMMAND [ARGS...]")
	}
	p := &Plan{Mode: "sandbox", Backend: "native", Sources: map[string]string{}}
	ls, err := layersFor(r, p)
	if err != nil {
		return nil, err
	}
	if err := resolveSettings(r, ls, p); err != nil {
		return nil, err
	}
	p.Command.Args = r.Args
	if r.Config != nil && r.Config.Pack != nil {
		p.Pack = r.Config.Pack
	}
	if p.Command.Env, err = resolveEnv(r, ls, p); err != nil {
		return nil, err
	}
	refusal := resolveInstall(r, ls, p)
	var ref *Refused
	if refusal != nil && !errors.As(refusal, &ref) {
		return nil, refusal
	}
	if p.Mode == "host" {
		if err := checkHostAllowed(p); err != nil {
			return nil, err
		}
	} else if err := checkStoreHidden(r.Store, p); err != nil {
		return nil, err
	}
	if ref != nil {
		return nil, ref
	}
	return p, nil
}

// Refused is a plan that resolved but that the policy refuses to run (an
// install without a lockfile): Resolve returns no plan with it, so that a
// caller that runs what it gets cannot run it; pinfold plan prints Plan,
// with Err, as what run would refuse.
type Refused struct {
	Plan *Plan
	Err  error
}

func (e *Refused) Error() string { return e.Err.Error() }
func (e *Refused) Unwrap() error { return e.Err }

// checkStoreHidden refuses a workspace, capture or mount that is pinfold's
// store or lies inside it: a sandbox that could write the store could
// change the bases, changesets, apply journals and launch records of later
// runs, which act on the host. (A directory that holds the store shows it
// empty inside: sandbox/native hides it.) Paths are compared with their
// symbolic links resolved; the caches pinfold itself mounts from the store
// are not the user's to choose and stay allowed.
func checkStoreHidden(store string, p *Plan) error {
	if store == "" {
		return nil
	}
	real := func(path string) string {
		if r, err := filepath.EvalSymlinks(path); err == nil {
			return r
		}
		return filepath.Clean(path)
	}
	st := real(store)
	inside := func(path string) bool {
		path = real(path)
		return path == st || strings.HasPrefix(path, st+"/")
	}
	refuse := func(what, path string) error {
		e := fault.New(fault.BadValue, what+" "+path+" is pinfold's store or inside it ("+store+"); no sandbox may see it",
			"", "run from, and mount, a directory outside the store", nil)
		e.Exit = fault.ExitUsage
		return e
	}
	sp := &p.Sandbox
	if sp.Access != sandbox.AccessNone && sp.Workspace != "" && inside(sp.Workspace) {
		return refuse("the workspace", sp.Workspace)
	}
	for _, c := range p.Captures {
		if inside(c) {
			return refuse("the capture", c)
		}
	}
	caches := map[string]bool{}
	for _, c := range p.Caches {
		caches[c.Source] = true
	}
	for _, m := range sp.Mounts {
		if !caches[m.Source] && inside(m.Source) {
			return refuse("the mount", m.Source)
		}
	}
	return nil
}

// Keys returns the setting names of Sources, sorted.
func (p *Plan) Keys() []string {
	k := make([]string, 0, len(p.Sources))
	for n := range p.Sources {
		k = append(k, n)
	}
	sort.Strings(k)
	return k
}

func usage(what, fix string) error {
	e := fault.New(fault.Usage, what, "", fix, nil)
	e.Exit = fault.ExitUsage
	return e
}

func badValue(setting, value, want string) error {
	if !strings.HasPrefix(setting, "--") {
		setting = "--" + flagName(setting) + " / " + setting
	}
	e := fault.New(fault.BadValue, fmt.Sprintf("invalid %s value %q", setting, value), "", "use "+want, nil)
	e.Exit = fault.ExitUsage
	return e
}

// checkNetwork refuses network settings that do nothing in the chosen mode,
// and entries that do not parse, before anything starts.
func checkNetwork(sp *sandbox.Spec) error {
	n := &sp.Net
	// Settings a mode has no use for (an allow list with outbound, a deny
	// list with none...) are left alone, so that a profile can change the
	// mode of a file that sets them; only contradictions are refused.
	switch {
	case sp.Network == sandbox.NetworkAllow && len(n.Allow) == 0:
		return badValue("network", "allow", "at least one --allow entry (a name, *.wildcard or CIDR)")
	case sp.Network == sandbox.NetworkHost && len(n.Publish) > 0:
		return badValue("publish", strings.Join(n.Publish, ","), "--network none, outbound or allow (with the host's network the ports are the host's already)")
	}
	if _, err := netpolicy.ParseRules(n.Allow, n.Deny); err != nil {
		return badEntry(err)
	}
	for _, p := range n.Publish {
		if _, err := netpolicy.ParsePublish(p); err != nil {
			return badEntry(err)
		}
	}
	for _, d := range n.DNS {
		if _, err := netpolicy.ParseDNS(d); err != nil {
			return badEntry(err)
		}
	}
	return nil
}

// badEntry reports a network entry that does not parse; err says what is
// wrong and what would be right.
func badEntry(err error) error {
	e := fault.New(fault.BadValue, err.Error(), "", "see docs/network.md for the forms each setting takes", nil)
	e.Exit = fault.ExitUsage
	return e
}
