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
	"github.com/pinfold/pinfold/internal/disk"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/units"
	"github.com/pinfold/pinfold/sandbox"

	"github.com/pinfold/pinfold/internal/netpolicy"
	"github.com/pinfold/pinfold/internal/store"
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

// layer is one source of settings, lowest priority first.
type layer struct {
	s     *config.Settings
	label func(key string) string
	dir   string // host paths in this layer are relative to it
}

// layersFor finds the profile dispatch chooses and returns the layers:
// top-level settings, the profile, and the flags (defaults are implicit).
func layersFor(r *Request, p *Plan) ([]layer, error) {
	var ls []layer
	if f := r.Config; f != nil {
		p.Audit.Config = f.Path
		dir := filepath.Dir(f.Path)
		name := filepath.Base(f.Path)
		top := f.Settings
		ls = append(ls, layer{s: &top, dir: dir, label: func(k string) string {
			return fmt.Sprintf("%s:%d (top level)", name, top.Pos[k].Line)
		}})
		p.Dispatched = len(f.Dispatch) > 0
		if prof, rule := dispatch(f, r.Args); prof != nil {
			p.Audit.Profile = prof.Name
			p.Audit.Rule = ruleText(rule, name)
			s := prof.Settings
			pname := prof.Name
			ls = append(ls, layer{s: &s, dir: dir, label: func(k string) string {
				return fmt.Sprintf("%s:%d (profile %s)", name, s.Pos[k].Line, pname)
			}})
		}
	}
	fs, err := flagSettings(&r.Flags)
	if err != nil {
		return nil, err
	}
	ls = append(ls, layer{s: fs, dir: r.Cwd, label: func(k string) string { return FromFlag + " --" + flagName(k) }})
	return ls, nil
}

// flagName is the flag spelling of a setting.
func flagName(key string) string {
	switch key {
	case "cap_add":
		return "cap-add"
	case "capabilities":
		return "capability"
	case "mounts":
		return "mount"
	case "limits.tmp_size":
		return "tmp-size"
	case "limits.disk":
		return "disk"
	case "ports":
		return "publish"
	case "require_pinned_image":
		return "require-pinned-image"
	case "verify_signature", "trusted_keys":
		return "verify-key"
	}
	if strings.HasPrefix(key, "limits.") {
		return key[len("limits."):]
	}
	return key
}

// flagSettings expresses the flags as a settings layer.
func flagSettings(f *Flags) (*config.Settings, error) {
	s := &config.Settings{}
	str := func(v string) *string {
		if v == "" {
			return nil
		}
		return &v
	}
	s.Backend, s.Base, s.Access, s.Workspace = str(f.Backend), str(f.Base), str(f.Access), str(f.Workspace)
	s.Workdir, s.Network, s.User, s.Hostname = str(f.Workdir), str(f.Network), str(f.User), str(f.Hostname)
	for _, m := range f.Mounts {
		mt, err := parseMount(m)
		if err != nil {
			return nil, err
		}
		s.Mounts = append(s.Mounts, mt)
	}
	s.CapAdd = f.CapAdd
	s.Capture = f.Capture
	s.Allow, s.Deny, s.Ports, s.DNS = f.Allow, f.Deny, f.Publish, f.DNS
	if f.HostLoopback {
		s.HostLoopback = &f.HostLoopback
	}
	if f.RequirePinnedImage {
		s.RequirePinnedImage = &f.RequirePinnedImage
	}
	if len(f.VerifyKeys) > 0 {
		t := true
		s.VerifySignature, s.TrustedKeys = &t, f.VerifyKeys
	}
	if f.Memory != "" || f.Pids != "" || f.CPUs != "" || f.Timeout != "" || f.TmpSize != "" || f.Disk != "" {
		l := &config.Limits{Memory: str(f.Memory), Timeout: str(f.Timeout), TmpSize: str(f.TmpSize), Disk: str(f.Disk)}
		if f.Pids != "" {
			n, err := strconv.ParseInt(f.Pids, 10, 64)
			if err != nil || n < 1 {
				return nil, badValue("--pids", f.Pids, "a positive number of processes")
			}
			l.Pids = &n
		}
		if f.CPUs != "" {
			c, err := strconv.ParseFloat(f.CPUs, 64)
			if err != nil || c <= 0 {
				return nil, badValue("--cpus", f.CPUs, "a positive number of CPUs, like 0.5 or 2")
			}
			l.CPUs = &c
		}
		s.Limits = l
	}
	return s, nil
}

// resolveSettings merges the layers into the plan, field by field.
func resolveSettings(r *Request, ls []layer, p *Plan) error {
	sp := &p.Sandbox
	// pick returns the highest layer's value for a string setting.
	pick := func(key string, get func(*config.Settings) *string) (string, int) {
		for i := len(ls) - 1; i >= 0; i-- {
			if v := get(ls[i].s); v != nil {
				p.Sources[key] = ls[i].label(key)
				return *v, i
			}
		}
		p.Sources[key] = FromDefault
		return "", -1
	}
	backend, _ := pick("backend", func(s *config.Settings) *string { return s.Backend })
	switch backend {
	case "", "native":
		p.Backend = "native"
	case "host", "auto", "gvisor", "podman", "docker", "kubernetes":
		p.Backend = backend
	default:
		return badValue("backend", backend, "native, gvisor, podman, docker, kubernetes, host or auto")
	}
	if p.Backend == "host" {
		p.Mode = "host"
	}

	base, bl := pick("base", func(s *config.Settings) *string { return s.Base })
	var err error
	if sp.Base, err = parseBase(base, layerDir(ls, bl, r.Cwd), r.Home); err != nil {
		return err
	}
	p.Audit.Trust = trustOf(sp.Base)
	p.Audit.TrustLevel = trustLevel(sp.Base)
	if err := resolveImagePolicy(r, ls, p); err != nil {
		return err
	}

	ws, wl := pick("workspace", func(s *config.Settings) *string { return s.Workspace })
	switch {
	case wl >= 0:
		sp.Workspace = hostPath(ws, ls[wl].dir, r.Home)
	case r.Config != nil:
		sp.Workspace, p.Sources["workspace"] = filepath.Dir(r.Config.Path), "directory of "+filepath.Base(r.Config.Path)
	default:
		sp.Workspace, p.Sources["workspace"] = r.Cwd, FromCwd
	}

	access, _ := pick("access", func(s *config.Settings) *string { return s.Access })
	switch a := sandbox.Access(access); a {
	case "":
		sp.Access = sandbox.AccessChangeset
	case sandbox.AccessChangeset, sandbox.AccessReadWrite, sandbox.AccessReadOnly, sandbox.AccessNone:
		sp.Access = a
	default:
		return badValue("access", access, "changeset, rw, ro or none")
	}
	for i := len(ls) - 1; i >= 0; i-- {
		if ls[i].s.Capture != nil {
			p.Sources["capture"] = ls[i].label("capture")
			for _, c := range ls[i].s.Capture {
				p.Captures = append(p.Captures, hostPath(c, ls[i].dir, r.Home))
			}
			break
		}
	}
	p.Changeset, p.Apply = r.Flags.Changeset, r.Flags.Apply
	if p.Changeset != "" && sp.Access != sandbox.AccessChangeset {
		return badValue("--changeset", p.Changeset, "--changeset with the changeset access (not --access "+access+")")
	}

	user, _ := pick("user", func(s *config.Settings) *string { return s.User })
	switch user {
	case "":
	case "root", "0", "0:0":
		sp.Root = true
	default:
		return badValue("user", user, "root (the invoking user's ids are the default)")
	}

	host, _ := pick("hostname", func(s *config.Settings) *string { return s.Hostname })
	sp.Hostname = host
	if host == "" {
		sp.Hostname = sandbox.DefaultHostname
	} else if !validHostname(host) {
		return badValue("hostname", host, "letters, digits, '-' and '.', at most 64 characters")
	}

	network, netLayer := pick("network", func(s *config.Settings) *string { return s.Network })
	switch n := sandbox.Network(network); n {
	case "":
		sp.Network = sandbox.NetworkNone
	case sandbox.NetworkNone, sandbox.NetworkHost, sandbox.NetworkOutbound, sandbox.NetworkAllow:
		sp.Network = n
	default:
		return badValue("network", network, "none, host, outbound or allow")
	}
	list := func(key string, get func(*config.Settings) []string) []string {
		for i := len(ls) - 1; i >= 0; i-- {
			if v := get(ls[i].s); v != nil {
				p.Sources[key] = ls[i].label(key)
				return v
			}
		}
		return nil
	}
	sp.Net.Allow = list("allow", func(s *config.Settings) []string { return s.Allow })
	sp.Net.Deny = list("deny", func(s *config.Settings) []string { return s.Deny })
	sp.Net.Publish = list("ports", func(s *config.Settings) []string { return s.Ports })
	sp.Net.DNS = list("dns", func(s *config.Settings) []string { return s.DNS })
	for i := len(ls) - 1; i >= 0; i-- {
		if v := ls[i].s.HostLoopback; v != nil {
			sp.Net.HostLoopback = *v
			p.Sources["host_loopback"] = ls[i].label("host_loopback")
			break
		}
	}
	if len(sp.Net.Allow) > 0 && netLayer < 0 {
		// An allow list with no network chosen means that list.
		sp.Network = sandbox.NetworkAllow
		p.Sources["network"] = p.Sources["allow"]
	}
	if err := checkNetwork(sp); err != nil {
		return err
	}

	// Lists: the highest layer that sets one wins whole.
	for i := len(ls) - 1; i >= 0; i-- {
		if ls[i].s.Mounts != nil {
			p.Sources["mounts"] = ls[i].label("mounts")
			for _, m := range ls[i].s.Mounts {
				sp.Mounts = append(sp.Mounts, sandbox.Mount{Source: hostPath(m.Source, ls[i].dir, r.Home),
					Target: filepath.Clean(m.Target), ReadOnly: m.ReadOnly})
			}
			break
		}
	}
	p.Capabilities = list("capabilities", func(s *config.Settings) []string { return s.Capabilities })
	p.Auto = true
	for i := len(ls) - 1; i >= 0; i-- {
		if v := ls[i].s.Auto; v != nil {
			p.Auto = *v
			p.Sources["auto"] = ls[i].label("auto")
			break
		}
	}
	for i := len(ls) - 1; i >= 0; i-- {
		if ls[i].s.CapAdd != nil {
			p.Sources["cap_add"] = ls[i].label("cap_add")
			sp.Capabilities = ls[i].s.CapAdd
			break
		}
	}
	if err := resolveLimits(ls, p); err != nil {
		return err
	}
	if p.Disk > 0 && sp.Access != sandbox.AccessChangeset && len(p.Captures) == 0 {
		e := fault.New(fault.BadValue, "--disk caps what a changeset keeps, and this run has none",
			"with --access "+string(sp.Access)+" the command writes straight to the workspace",
			"run with --access changeset, or cap /tmp alone with --tmp-size", nil)
		e.Exit = fault.ExitUsage
		return e
	}
	if p.Apply && sp.Access != sandbox.AccessChangeset && len(p.Captures) == 0 {
		e := fault.New(fault.BadValue, "--apply applies a changeset, and this run has none",
			"with --access "+string(sp.Access)+" the command writes straight to the workspace, or not at all",
			"drop --apply, or run with --access changeset", nil)
		e.Exit = fault.ExitUsage
		return e
	}
	if f := &r.Flags; (f.Network == "none" || f.Network == "host") && len(f.Allow)+len(f.Deny) > 0 {
		// On one command line, a contradiction (in files, a profile may
		// change the mode of a list the top level sets).
		e := fault.New(fault.BadValue, "--allow and --deny filter the sandbox's own network, and --network "+f.Network+" has none to filter",
			"", "drop them, or use --network allow (only what --allow names) or outbound", nil)
		e.Exit = fault.ExitUsage
		return e
	}
	if err := resolveCachesAndSecrets(r, ls, p); err != nil {
		return err
	}

	workdir, _ := pick("workdir", func(s *config.Settings) *string { return s.Workdir })
	p.Command.Dir = workdir
	if workdir == "" {
		p.Command.Dir = sp.Workspace
		if sp.Access == sandbox.AccessNone && p.Mode == "sandbox" {
			p.Command.Dir = "/"
		} else if r.Cwd != "" && strings.HasPrefix(r.Cwd+"/", sp.Workspace+"/") {
			p.Command.Dir = r.Cwd // cwd follows when it lies in the workspace
		}
	} else if !filepath.IsAbs(workdir) {
		return badValue("workdir", workdir, "an absolute path inside the sandbox")
	}

	for i := len(ls) - 1; i >= 0; i-- {
		if h := ls[i].s.Host; h != nil {
			p.HostAllow = h.Allow
			p.Sources["host"] = ls[i].label("host")
			p.HostBlocked = append(p.HostBlocked, h.BlockEnv...)
			break
		}
	}
	p.HostBlocked = append(append([]string(nil), hostBlockedDefault[:]...), p.HostBlocked...)
	p.TTY, p.Interactive = r.Flags.TTY, r.Flags.Interactive
	return nil
}

func layerDir(ls []layer, i int, cwd string) string {
	if i < 0 {
		return cwd
	}
	return ls[i].dir
}

// resolveLimits merges limits sub-field by sub-field.
func resolveLimits(ls []layer, p *Plan) error {
	sp := &p.Sandbox
	sp.Limits.TmpSize = sandbox.DefaultTmpSize
	var err error
	for _, key := range []string{"memory", "pids", "cpus", "timeout", "tmp_size", "disk"} {
		for i := len(ls) - 1; i >= 0; i-- {
			l := ls[i].s.Limits
			if l == nil {
				continue
			}
			set := true
			switch key {
			case "memory":
				if set = l.Memory != nil; set {
					if sp.Limits.Memory, err = units.ParseSize(*l.Memory); err != nil || sp.Limits.Memory < 4<<20 {
						return badValue("memory", *l.Memory, "a size of at least 4m, like 512m or 2g")
					}
				}
			case "pids":
				if set = l.Pids != nil; set {
					if sp.Limits.Pids = *l.Pids; sp.Limits.Pids < 2 {
						return badValue("pids", strconv.FormatInt(*l.Pids, 10), "at least 2 processes (the sandbox's init and the command)")
					}
				}
			case "cpus":
				if set = l.CPUs != nil; set {
					if sp.Limits.CPUs = *l.CPUs; sp.Limits.CPUs < 0.01 {
						return badValue("cpus", strconv.FormatFloat(*l.CPUs, 'g', -1, 64), "at least 0.01 CPUs")
					}
				}
			case "timeout":
				if set = l.Timeout != nil; set {
					if p.Timeout, err = units.ParseDuration(*l.Timeout); err != nil || p.Timeout <= 0 {
						return badValue("timeout", *l.Timeout, "a duration like 30s, 5m or 1h30m (or seconds)")
					}
				}
			case "tmp_size":
				if set = l.TmpSize != nil; set {
					if sp.Limits.TmpSize, err = units.ParseSize(*l.TmpSize); err != nil || sp.Limits.TmpSize < 1<<20 {
						return badValue("tmp-size", *l.TmpSize, "a size of at least 1m, like 256m")
					}
				}
			case "disk":
				if set = l.Disk != nil; set {
					if *l.Disk == "none" || *l.Disk == "0" {
						p.Disk = 0
					} else if p.Disk, err = units.ParseSize(*l.Disk); err != nil || p.Disk < disk.MinSize {
						return badValue("disk", *l.Disk, "a size of at least 16m, like 2g, or none")
					}
				}
			}
			if set {
				p.Sources["limits."+key] = ls[i].label("limits." + key)
				break
			}
		}
	}
	return nil
}

// resolveCachesAndSecrets mounts the caches and secrets of the highest
// layer that names any.
func resolveCachesAndSecrets(r *Request, ls []layer, p *Plan) error {
	for i := len(ls) - 1; i >= 0; i-- {
		if ls[i].s.Caches == nil {
			continue
		}
		from := ls[i].label("caches")
		p.Sources["caches"] = from
		for _, c := range ls[i].s.Caches {
			src := filepath.Join(r.Store, "caches", workspaceKey(p.Sandbox.Workspace), c.Name)
			p.Caches = append(p.Caches, Cache{Name: c.Name, Source: src, Target: filepath.Clean(c.Path), From: from})
			p.Sandbox.Mounts = append(p.Sandbox.Mounts, sandbox.Mount{Source: src, Target: filepath.Clean(c.Path)})
		}
		break
	}
	for i := len(ls) - 1; i >= 0; i-- {
		if ls[i].s.Secrets == nil {
			continue
		}
		from := ls[i].label("secrets")
		p.Sources["secrets"] = from
		for _, s := range ls[i].s.Secrets {
			target := s.Path
			if target == "" {
				target = "/run/secrets/" + s.Name
			}
			src := hostPath(s.File, ls[i].dir, r.Home)
			p.Secrets = append(p.Secrets, Secret{Name: s.Name, Source: src, Target: target, Env: s.Env, From: from})
			p.Sandbox.Mounts = append(p.Sandbox.Mounts, sandbox.Mount{Source: src, Target: target, ReadOnly: true})
		}
		break
	}
	return nil
}

// workspaceKey names a workspace's caches in the store.
func workspaceKey(ws string) string {
	// FNV-1a, 64 bits: stable, short, and no crypto needed to name a dir.
	h := uint64(14695981039346656037)
	for i := 0; i < len(ws); i++ {
		h ^= uint64(ws[i])
		h *= 1099511628211
	}
	return strconv.FormatUint(h, 16)
}

// resolveInstall applies the install-style policy: role, lockfiles, hooks.
func resolveInstall(r *Request, ls []layer, p *Plan) error {
	p.Audit.Role = "run"
	var lockfiles []string
	require := false
	for i := len(ls) - 1; i >= 0; i-- {
		if v := ls[i].s.Role; v != nil {
			switch *v {
			case "install", "run", "build":
				p.Audit.Role = *v
			default:
				return badValue("role", *v, "install, run or build")
			}
			p.Sources["role"] = ls[i].label("role")
			break
		}
	}
	for i := len(ls) - 1; i >= 0; i-- {
		if ls[i].s.LockfileFiles != nil {
			lockfiles = ls[i].s.LockfileFiles
			p.Sources["lockfile_files"] = ls[i].label("lockfile_files")
			break
		}
	}
	for i := len(ls) - 1; i >= 0; i-- {
		if v := ls[i].s.RequireLockfile; v != nil {
			require = *v
			p.Sources["require_lockfile"] = ls[i].label("require_lockfile")
			break
		}
	}
	for i := len(ls) - 1; i >= 0; i-- {
		if ls[i].s.PreRun == nil {
			continue
		}
		from := ls[i].label("pre_run")
		for _, h := range ls[i].s.PreRun {
			if h.Shell != "" {
				p.Hooks = append(p.Hooks, Hook{Args: []string{"/bin/sh", "-c", h.Shell}, Shell: h.Shell, From: from})
			} else {
				p.Hooks = append(p.Hooks, Hook{Args: h.Args, From: from})
			}
		}
		break
	}
	switch {
	case len(lockfiles) == 0:
		p.Audit.Lockfile = "none configured"
	default:
		var found []string
		for _, lf := range lockfiles {
			if r.Exists != nil && r.Exists(filepath.Join(p.Sandbox.Workspace, lf)) {
				found = append(found, lf)
			}
		}
		if len(found) > 0 {
			p.Audit.Lockfile = "present: " + strings.Join(found, ", ")
		} else {
			p.Audit.Lockfile = "missing: none of " + strings.Join(lockfiles, ", ")
			if require && p.Audit.Role == "install" {
				e := fault.New(fault.LockfileMissing,
					"refusing to install without a lockfile in "+p.Sandbox.Workspace,
					"the profile requires one of "+strings.Join(lockfiles, ", ")+" (require_lockfile: true), so that "+
						"an install only fetches what was reviewed",
					"commit a lockfile"+lockfileHint(lockfiles)+", or set require_lockfile: false for this profile", nil)
				return &Refused{Plan: p, Err: e}
			}
		}
	}
	return nil
}

// lockfileMakers says how each well-known lockfile is made.
var lockfileMakers = map[string]string{
	"package-lock.json":   "npm install --package-lock-only",
	"npm-shrinkwrap.json": "npm shrinkwrap",
	"yarn.lock":           "yarn install --mode update-lockfile",
	"pnpm-lock.yaml":      "pnpm install --lockfile-only",
	"bun.lock":            "bun install --lockfile-only",
	"poetry.lock":         "poetry lock",
	"uv.lock":             "uv lock",
	"Pipfile.lock":        "pipenv lock",
	"Cargo.lock":          "cargo generate-lockfile",
	"go.sum":              "go mod tidy",
	"Gemfile.lock":        "bundle lock",
	"composer.lock":       "composer update --lock",
	"requirements.txt":    "pip freeze > requirements.txt",
	"pylock.toml":         "pip lock",
}

// lockfileHint names the commands that make the profile's lockfiles, for
// those pinfold knows: a profile of pip's is not told to run npm.
func lockfileHint(lockfiles []string) string {
	var how []string
	for _, lf := range lockfiles {
		if m, ok := lockfileMakers[filepath.Base(lf)]; ok {
			how = append(how, m)
		}
	}
	if len(how) == 0 {
		return " (made by your package manager, run outside this policy)"
	}
	return " (" + strings.Join(how, ", or ") + ", run outside this policy)"
}

// hostBlockedDefault are variables that make a program load or run code
// chosen by whoever set them; backend host never passes them.
var hostBlockedDefault = [...]string{
	"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "LD_DEBUG*", "LD_PROFILE*", "GCONV_PATH", "GLIBC_TUNABLES",
	"NODE_OPTIONS", "NODE_PATH", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PERL5OPT", "PERL5LIB",
	"PERLLIB", "RUBYOPT", "RUBYLIB", "BASH_ENV", "ENV", "PROMPT_COMMAND", "JAVA_TOOL_OPTIONS",
	"_JAVA_OPTIONS", "DYLD_*", "GIT_SSH_COMMAND", "GIT_EXEC_PATH",
}

// checkHostAllowed refuses a host-mode command that no allow glob matches.
func checkHostAllowed(p *Plan) error {
	line := strings.Join(p.Command.Args, " ")
	for _, g := range p.HostAllow {
		if globMatch(g, line) {
			p.Audit.Rule = strings.TrimSpace(p.Audit.Rule + "; host allow " + strconv.Quote(g))
			return nil
		}
	}
	why := "backend host runs commands unsandboxed, so only those matching host.allow may run"
	if len(p.HostAllow) == 0 {
		why += "; none is allowed (host.allow is empty)"
	} else {
		why += "; allowed: " + strings.Join(p.HostAllow, ", ")
	}
	return fault.New(fault.HostRefused, "refusing to run "+strconv.Quote(line)+" on the host", why+
		" (backend from "+p.Sources["backend"]+")",
		"add a glob matching it to host.allow, or run it in a sandbox (backend: native)", nil)
}

// CheckEnvFlag checks an --env entry, of pinfold run or pinfold exec:
// NAME=VALUE, or NAME to pass the host's value.
func CheckEnvFlag(e string) error {
	name, _, _ := strings.Cut(e, "=")
	if why := config.CheckEnvName(name); why != "" {
		return badValue("--env", e, "NAME=VALUE, or NAME to pass the host's value, with a NAME of letters, digits and '_', not starting with a digit")
	}
	return nil
}

// resolveEnv builds the command's environment, lowest priority first:
// defaults, env.pass, env.set (top level, then the profile), --env. Names
// denied by env.deny are never taken from the host.
func resolveEnv(r *Request, ls []layer, p *Plan) ([]EnvVar, error) {
	var deny []string
	for _, l := range ls {
		if e := l.s.Env; e != nil {
			deny = append(deny, e.Deny...)
		}
	}
	denied := func(name string) bool {
		for _, g := range deny {
			if globMatch(g, name) {
				return true
			}
		}
		return false
	}
	vars := map[string]EnvVar{}
	var order []string
	put := func(v EnvVar) {
		if _, ok := vars[v.Name]; !ok {
			order = append(order, v.Name)
		}
		vars[v.Name] = v
	}
	if p.Mode == "host" {
		for _, kv := range r.Environ {
			name, value, _ := strings.Cut(kv, "=")
			if !denied(name) && !blocked(p.HostBlocked[:], name) {
				put(EnvVar{Name: name, Value: value, From: FromHost, Secret: looksSecret(name)})
			}
		}
	} else {
		for _, kv := range sandbox.DefaultEnv(&p.Sandbox, r.Flags.TTY) {
			name, value, _ := strings.Cut(kv, "=")
			if name == "TERM" && r.Term != "" {
				value = r.Term
			}
			put(EnvVar{Name: name, Value: value, From: FromDefault})
		}
	}
	for _, l := range ls[:len(ls)-1] { // config layers; flags come last
		e := l.s.Env
		if e == nil {
			continue
		}
		for _, g := range e.Pass {
			for _, kv := range r.Environ {
				name, value, _ := strings.Cut(kv, "=")
				if globMatch(g, name) && !denied(name) {
					put(EnvVar{Name: name, Value: value, From: FromHost + " (" + l.label("env.pass") + ")", Secret: looksSecret(name)})
				}
			}
		}
		for _, name := range e.SetOrder {
			put(EnvVar{Name: name, Value: e.Set[name], From: l.label("env.set")})
		}
	}
	for _, s := range p.Secrets {
		if s.Env != "" {
			put(EnvVar{Name: s.Env, Value: s.Target, From: s.From + " (secret " + s.Name + ")"})
		}
	}
	for _, e := range r.Flags.Env {
		if err := CheckEnvFlag(e); err != nil {
			return nil, err
		}
		name, value, hasValue := strings.Cut(e, "=")
		if hasValue {
			put(EnvVar{Name: name, Value: value, From: FromFlag + " --env"})
			continue
		}
		if denied(name) {
			return nil, fault.New(fault.BadValue, "--env "+name+" asks for a host variable the config denies",
				"env.deny in "+p.Audit.Config+" matches "+name, "remove --env "+name+", or set it with --env "+name+"=VALUE", nil)
		}
		if r.Getenv == nil {
			continue
		}
		if v, ok := r.Getenv(name); ok {
			put(EnvVar{Name: name, Value: v, From: FromHost + " (--env)", Secret: looksSecret(name)})
		}
	}
	if p.Mode == "host" {
		for _, n := range order {
			if blocked(p.HostBlocked, n) {
				delete(vars, n)
			}
		}
	}
	env := make([]EnvVar, 0, len(order))
	for _, n := range order {
		if v, ok := vars[n]; ok {
			env = append(env, v)
		}
	}
	return env, nil
}

func blocked(globs []string, name string) bool {
	for _, g := range globs {
		if globMatch(g, name) {
			return true
		}
	}
	return false
}

// looksSecret reports names that usually hold credentials.
func looksSecret(name string) bool {
	u := strings.ToUpper(name)
	for _, w := range [...]string{"TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL", "AUTH"} {
		if strings.Contains(u, w) {
			return true
		}
	}
	return false
}

// dispatch returns the profile the first matching rule names.
func dispatch(f *config.File, args []string) (*config.Profile, *config.Rule) {
	line := strings.Join(args, " ")
	for i := range f.Dispatch {
		rule := &f.Dispatch[i]
		if ruleMatches(rule, args, line) {
			for j := range f.Profiles {
				if f.Profiles[j].Name == rule.Profile {
					return &f.Profiles[j], rule
				}
			}
		}
	}
	return nil, nil
}

func ruleMatches(rule *config.Rule, args []string, line string) bool {
	switch {
	case rule.Match != "":
		return globMatch(rule.Match, line)
	case rule.Command != "":
		if filepath.Base(args[0]) != rule.Command {
			return false
		}
		rest := args[1:]
		for i, g := range rule.Args {
			if i == len(rule.Args)-1 && g == "*" {
				return true // a trailing * also matches no argument
			}
			if i >= len(rest) || !globMatch(g, rest[i]) {
				return false
			}
		}
		return len(rule.Args) == 0 || len(rest) == len(rule.Args)
	case rule.Regex != "":
		re, err := rule.CompiledRegex()
		return err == nil && re.MatchString(line)
	}
	return false
}

func ruleText(rule *config.Rule, file string) string {
	var what string
	switch {
	case rule.Match != "":
		what = "match " + strconv.Quote(rule.Match)
	case rule.Command != "":
		what = "command " + rule.Command
		if len(rule.Args) > 0 {
			what += " args [" + strings.Join(rule.Args, ", ") + "]"
		}
	default:
		what = "regex " + strconv.Quote(rule.Regex)
	}
	return fmt.Sprintf("%s:%d: %s -> %s", file, rule.Pos.Line, what, rule.Profile)
}

// globMatch matches a glob in which * also crosses "/" (command lines and
// variable names are not paths).
func globMatch(glob, s string) bool {
	ok, err := matchGlob(glob, s)
	return err == nil && ok
}

func parseBase(s, dir, home string) (sandbox.Base, error) {
	kind, path, _ := strings.Cut(s, ":")
	switch {
	case s == "" || s == "host":
		return sandbox.Base{Kind: sandbox.BaseHost}, nil
	case s == "debian-12":
		return sandbox.Base{Kind: sandbox.BaseDebian12}, nil
	case (kind == "dir" || kind == "tar") && path != "":
		return sandbox.Base{Kind: sandbox.BaseKind(kind), Path: hostPath(path, dir, home)}, nil
	case kind == "oci" && store.IsReference(path):
		// A registry reference: pulled into the store on first use.
		return sandbox.Base{Kind: sandbox.BaseOCI, Ref: strings.TrimPrefix(path, "docker://")}, nil
	case kind == "oci" && path != "":
		// oci:PATH or oci:PATH:REF, as podman writes them; the path ends
		// at its first ':' so that a REF may hold colons (alpine:3.19,
		// sha256:...).
		ref := ""
		if i := strings.IndexByte(path, ':'); i > 0 {
			path, ref = path[:i], path[i+1:]
		}
		return sandbox.Base{Kind: sandbox.BaseOCI, Path: hostPath(path, dir, home), Ref: ref}, nil
	}
	return sandbox.Base{}, badValue("base", s, "host, debian-12, dir:PATH, tar:PATH or oci:PATH[:REF]")
}

func trustLevel(b sandbox.Base) string {
	switch {
	case b.Kind == sandbox.BaseHost:
		return TrustHost
	case b.Kind == sandbox.BaseOCI && b.Path == "" && store.Pinned(b.Ref):
		return TrustPinned
	case b.Kind == sandbox.BaseOCI && b.Path == "":
		return TrustMutable
	}
	return TrustLocal
}

// resolveImagePolicy merges require_pinned_image, verify_signature and
// trusted_keys, and refuses what they rule out.
func resolveImagePolicy(r *Request, ls []layer, p *Plan) error {
	ip := &p.Image
	for i := len(ls) - 1; i >= 0; i-- {
		if v := ls[i].s.RequirePinnedImage; v != nil {
			ip.RequirePinned = *v
			p.Sources["require_pinned_image"] = ls[i].label("require_pinned_image")
			break
		}
	}
	for i := len(ls) - 1; i >= 0; i-- {
		if v := ls[i].s.VerifySignature; v != nil {
			ip.Verify = *v
			p.Sources["verify_signature"] = ls[i].label("verify_signature")
			break
		}
	}
	for i := len(ls) - 1; i >= 0; i-- {
		if v := ls[i].s.TrustedKeys; v != nil {
			for _, k := range v {
				ip.Keys = append(ip.Keys, hostPath(k, layerDir(ls, i, r.Cwd), r.Home))
			}
			p.Sources["trusted_keys"] = ls[i].label("trusted_keys")
			break
		}
	}
	b := p.Sandbox.Base
	registry := b.Kind == sandbox.BaseOCI && b.Path == ""
	if ip.RequirePinned && registry && !store.Pinned(b.Ref) {
		return fault.New(fault.Unpinned, "the image "+b.Ref+" is named by a tag, and require_pinned_image is set (from "+p.Sources["require_pinned_image"]+")",
			"a tag may name other content tomorrow; a digest names one manifest",
			"name it by digest: oci:"+repoOf(b.Ref)+"@sha256:... (skopeo inspect docker://"+b.Ref+" shows it)", nil)
	}
	if ip.Verify {
		// An image file carries its signature inside (pinfold pack --sign-key).
		if !registry && b.Kind != sandbox.BaseOCI {
			return fault.New(fault.Unverified, "verify_signature is set (from "+p.Sources["verify_signature"]+"), but the base "+string(b.Kind)+" is no image",
				"signatures are checked for registry images (oci:HOST/REPO...) and image files pinfold pack signed; pinfold never runs a plan with less checking than it asks for",
				"use a signed image, or set verify_signature: false for this base", nil)
		}
		if len(ip.Keys) == 0 {
			return fault.New(fault.Unverified, "verify_signature is set, but no trusted key is given", "",
				"list PEM public keys in trusted_keys, or give --verify-key FILE", nil)
		}
	}
	return nil
}

func repoOf(ref string) string {
	r, _ := store.SplitReference(ref)
	return r
}

func trustOf(b sandbox.Base) string {
	switch b.Kind {
	case sandbox.BaseTar:
		return "tar base: extracted by content digest (sha256), no signature checked"
	case sandbox.BaseDir:
		return "dir base: used as it is, nothing verified"
	case sandbox.BaseDebian12:
		return "debian-12: built by pinfold with debootstrap from the machine's Debian mirror (apt verifies the packages' signatures); named by the digest of its tree"
	case sandbox.BaseOCI:
		return "oci base: layers checked against their sha256 digests, no signature checked"
	}
	return "host base: the host's own system directories, read-only"
}

// hostPath resolves a host path written relative to dir, with ~ for home.
func hostPath(p, dir, home string) string {
	switch {
	case p == "~":
		return home
	case strings.HasPrefix(p, "~/"):
		return filepath.Join(home, p[2:])
	case filepath.IsAbs(p):
		return filepath.Clean(p)
	}
	return filepath.Join(dir, p)
}

// parseMount reads SRC:DST[:ro|rw].
func parseMount(s string) (config.Mount, error) {
	parts := strings.Split(s, ":")
	var m config.Mount
	switch {
	case len(parts) == 3 && (parts[2] == "ro" || parts[2] == "rw"):
		m.ReadOnly = parts[2] == "ro"
	case len(parts) == 2:
	default:
		return m, badValue("--mount", s, "SRC:DST or SRC:DST:ro")
	}
	m.Source, m.Target = parts[0], parts[1]
	if m.Source == "" || !filepath.IsAbs(m.Target) {
		return m, badValue("--mount", s, "SRC:DST with an absolute DST")
	}
	return m, nil
}

func validHostname(h string) bool {
	if len(h) > 64 {
		return false
	}
	for _, c := range h {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
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
