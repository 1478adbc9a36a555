package plan

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/pinfold/pinfold/internal/units"
	"github.com/pinfold/pinfold/sandbox"
)

// masked replaces values that must never be printed.
const masked = "***"

// Text writes the plan for people, with where each setting came from.
func (p *Plan) Text(w io.Writer) {
	fmt.Fprintf(w, "command:    %s\n", quoteArgs(p.Command.Args))
	fmt.Fprintf(w, "mode:       %s\n", p.Mode)
	backend := p.Backend
	if p.BackendReason != "" {
		backend += " (" + p.BackendReason + ")"
	}
	fmt.Fprintf(w, "backend:    %s%s\n", backend, p.src("backend"))
	if p.Mode == "host" {
		p.textHost(w)
	} else {
		p.textBase(w)
		p.textWorkspace(w)
		p.textNetwork(w)
		p.textMounts(w)
		p.textLimits(w)
	}
	p.textEnv(w)
	p.textAudit(w)
	if p.Refused != "" {
		fmt.Fprintf(w, "refused: run would refuse this plan: %s\n", p.Refused)
	}
}

// src is where key's value came from, as Text shows it after the value
// ("" for a default).
func (p *Plan) src(key string) string {
	if s, ok := p.Sources[key]; ok && s != FromDefault {
		return "  (" + s + ")"
	}
	return ""
}

// textHost is what a run on the host may do.
func (p *Plan) textHost(w io.Writer) {
	fmt.Fprintf(w, "host allow: %s%s\n", strings.Join(p.HostAllow, ", "), p.src("host"))
	fmt.Fprintf(w, "blocked:    %s\n", strings.Join(p.HostBlocked, " "))
	fmt.Fprintf(w, "limits:\n")
	for _, u := range p.HostUnenforced() {
		fmt.Fprintf(w, "  %s: the host cannot enforce it; pinfold run refuses this plan (PF143)\n", u)
	}
	fmt.Fprintf(w, "  timeout:  %s%s\n", orNone(p.Timeout > 0, p.Timeout.String()), p.src("limits.timeout"))
}

// textBase is the sandbox's root: the base and what the store makes of it.
func (p *Plan) textBase(w io.Writer) {
	sp := &p.Sandbox
	base := string(sp.Base.Kind)
	if sp.Base.Path != "" {
		base += ":" + sp.Base.Path
	}
	if sp.Base.Ref != "" {
		base += ":" + sp.Base.Ref
	}
	fmt.Fprintf(w, "base:       %s%s\n", base, p.src("base"))
	sys := p.System
	if sys == nil {
		return
	}
	fmt.Fprintf(w, "  base id:  %s\n", orElse(sys.BaseID, "not in the store yet (the first run builds or imports it)"))
	for _, f := range sys.Findings {
		name := orElse(f.Capability, "(none provides it)")
		fmt.Fprintf(w, "  capability %s: %s: %s\n", name, f.Source, f.Evidence)
	}
	if len(sys.Packages) > 0 {
		fmt.Fprintf(w, "  packages: %s\n", strings.Join(sys.Packages, " "))
	}
	switch {
	case sys.SandboxID == "":
	case sys.Image != "":
		fmt.Fprintf(w, "  sandbox id: %s (image built %s)\n", sys.SandboxID, sys.ImageCreated)
	case len(sys.Capabilities) > 0:
		fmt.Fprintf(w, "  sandbox id: %s (image built on the first run)\n", sys.SandboxID)
	default:
		fmt.Fprintf(w, "  sandbox id: %s\n", sys.SandboxID)
	}
}

// textWorkspace is the workspace, what is kept of the writes, and where
// and as whom the command runs.
func (p *Plan) textWorkspace(w io.Writer) {
	sp := &p.Sandbox
	fmt.Fprintf(w, "workspace:  %s (%s)  (%s)\n", sp.Workspace, sp.Access, p.Sources["workspace"])
	if roots := p.ChangesetRoots(); len(roots) > 0 {
		if p.Changeset != "" {
			fmt.Fprintf(w, "changeset:  on top of %s, keeping the writes to %s\n", p.Changeset, strings.Join(roots, ", "))
		} else {
			fmt.Fprintf(w, "changeset:  new, keeping the writes to %s in pinfold's store\n", strings.Join(roots, ", "))
		}
	}
	for _, c := range p.Captures {
		fmt.Fprintf(w, "capture:    %s (writes kept in the changeset)%s\n", c, p.src("capture"))
	}
	if p.Apply {
		fmt.Fprintf(w, "apply:      when the command succeeds\n")
	}
	fmt.Fprintf(w, "workdir:    %s%s\n", p.Command.Dir, p.src("workdir"))
	user := "invoking user"
	if sp.Root {
		user = "root (in the user namespace)"
	}
	fmt.Fprintf(w, "user:       %s%s\n", user, p.src("user"))
	fmt.Fprintf(w, "hostname:   %s%s\n", sp.Hostname, p.src("hostname"))
}

func (p *Plan) textNetwork(w io.Writer) {
	n := &p.Sandbox.Net
	fmt.Fprintf(w, "network:    %s%s\n", p.Sandbox.Network, p.src("network"))
	for _, l := range []struct {
		key  string
		list []string
	}{{"allow", n.Allow}, {"deny", n.Deny}, {"ports", n.Publish}, {"dns", n.DNS}} {
		if len(l.list) > 0 {
			fmt.Fprintf(w, "  %-10s%s%s\n", l.key+":", strings.Join(l.list, ", "), p.src(l.key))
		}
	}
	if n.HostLoopback {
		fmt.Fprintf(w, "  host loopback: at 10.0.2.2%s\n", p.src("host_loopback"))
	}
}

// textMounts is what the sandbox shows of the host: mounts, caches and
// secrets (never their content).
func (p *Plan) textMounts(w io.Writer) {
	fmt.Fprintf(w, "mounts:\n")
	for _, m := range p.userMounts() {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		fmt.Fprintf(w, "  %s -> %s (%s)\n", m.Source, m.Target, mode)
	}
	for _, c := range p.Caches {
		fmt.Fprintf(w, "  cache %s: %s -> %s (rw)  (%s)\n", c.Name, c.Source, c.Target, c.From)
	}
	for _, s := range p.Secrets {
		fmt.Fprintf(w, "  secret %s: %s -> %s (ro, content not shown)  (%s)\n", s.Name, s.Source, s.Target, s.From)
	}
}

// textLimits is the sandbox's limits and its security settings.
func (p *Plan) textLimits(w io.Writer) {
	sp := &p.Sandbox
	fmt.Fprintf(w, "limits:\n")
	l := sp.Limits
	fmt.Fprintf(w, "  memory:   %s%s\n", orNone(l.Memory > 0, units.FormatSize(l.Memory)), p.src("limits.memory"))
	fmt.Fprintf(w, "  pids:     %s%s\n", orNone(l.Pids > 0, strconv.FormatInt(l.Pids, 10)), p.src("limits.pids"))
	fmt.Fprintf(w, "  cpus:     %s%s\n", orNone(l.CPUs > 0, strconv.FormatFloat(l.CPUs, 'g', -1, 64)), p.src("limits.cpus"))
	fmt.Fprintf(w, "  timeout:  %s%s\n", orNone(p.Timeout > 0, p.Timeout.String()), p.src("limits.timeout"))
	fmt.Fprintf(w, "  /tmp:     %s%s\n", units.FormatSize(l.TmpSize), p.src("limits.tmp_size"))
	if p.Disk > 0 {
		fmt.Fprintf(w, "  disk:     %s, changeset and /tmp together%s\n", units.FormatSize(p.Disk), p.src("limits.disk"))
	}
	fmt.Fprintf(w, "security:\n")
	caps := "none"
	if len(sp.Capabilities) > 0 {
		caps = strings.Join(sp.Capabilities, ", ")
	}
	fmt.Fprintf(w, "  namespaces: user, mount, pid, ipc, uts, cgroup%s\n", map[bool]string{true: ", net", false: ""}[sp.Network != sandbox.NetworkHost])
	fmt.Fprintf(w, "  capabilities: %s%s\n", caps, p.src("cap_add"))
	fmt.Fprintf(w, "  no_new_privs, seccomp filter, read-only root, own /proc /dev /tmp\n")
	if len(p.Layers) > 0 {
		fmt.Fprintf(w, "  layers: %s\n", strings.Join(p.Layers, ", "))
	}
}

// textEnv is the command's environment (secrets masked) and the hooks
// run before it.
func (p *Plan) textEnv(w io.Writer) {
	fmt.Fprintf(w, "env:\n")
	for _, v := range p.Command.Env {
		val := v.Value
		if v.Secret {
			val = masked
		}
		fmt.Fprintf(w, "  %s=%s  (%s)\n", v.Name, val, v.From)
	}
	if len(p.Hooks) > 0 {
		fmt.Fprintf(w, "pre_run hooks (on the host):\n")
		for _, h := range p.Hooks {
			text := h.Shell
			if text == "" {
				text = quoteArgs(h.Args)
			}
			fmt.Fprintf(w, "  %s  (%s)\n", text, h.From)
		}
	}
}

func (p *Plan) textAudit(w io.Writer) {
	a := p.Audit
	fmt.Fprintf(w, "audit:\n")
	fmt.Fprintf(w, "  config:   %s\n", orNone(a.Config != "", a.Config))
	if a.ConfigIgnored != "" {
		fmt.Fprintf(w, "  ignored:  %s\n", a.ConfigIgnored)
	}
	fmt.Fprintf(w, "  profile:  %s\n", orNone(a.Profile != "", a.Profile))
	fmt.Fprintf(w, "  rule:     %s\n", orNone(a.Rule != "", a.Rule))
	fmt.Fprintf(w, "  role:     %s%s\n", a.Role, p.src("role"))
	fmt.Fprintf(w, "  lockfile: %s\n", a.Lockfile)
	if p.Mode == "host" {
		return
	}
	fmt.Fprintf(w, "  trust:    %s: %s\n", a.TrustLevel, a.Trust)
	if ip := p.Image; ip.RequirePinned || ip.Verify {
		var what []string
		if ip.RequirePinned {
			what = append(what, "pinned digest required"+p.src("require_pinned_image"))
		}
		if ip.Verify {
			what = append(what, "cosign signature checked before use with "+strings.Join(ip.Keys, ", ")+p.src("verify_signature"))
		}
		fmt.Fprintf(w, "  image:    %s\n", strings.Join(what, "; "))
	}
}

// userMounts are the mounts other than caches and secrets.
func (p *Plan) userMounts() []sandbox.Mount {
	var ms []sandbox.Mount
outer:
	for _, m := range p.Sandbox.Mounts {
		for _, c := range p.Caches {
			if m.Target == c.Target {
				continue outer
			}
		}
		for _, s := range p.Secrets {
			if m.Target == s.Target {
				continue outer
			}
		}
		ms = append(ms, m)
	}
	return ms
}

// jsonEnv is an environment variable in the JSON plan.
type jsonEnv struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	From   string `json:"from"`
	Masked bool   `json:"masked,omitempty"`
}

// jsonMount is a mount in the JSON plan.
type jsonMount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readonly"`
}

// jsonPlan is the document JSON writes (pinfold plan --json); its lists
// are never null.
type jsonPlan struct {
	Command   []string          `json:"command"`
	Mode      string            `json:"mode"`
	Backend   string            `json:"backend"`
	Reason    string            `json:"backend_reason,omitempty"`
	Base      string            `json:"base,omitempty"`
	Workspace string            `json:"workspace,omitempty"`
	Access    string            `json:"access,omitempty"`
	Workdir   string            `json:"workdir"`
	Root      bool              `json:"root,omitempty"`
	Hostname  string            `json:"hostname,omitempty"`
	Network   string            `json:"network,omitempty"`
	Allow     []string          `json:"allow,omitempty"`
	Deny      []string          `json:"deny,omitempty"`
	Ports     []string          `json:"ports,omitempty"`
	DNS       []string          `json:"dns,omitempty"`
	HostLoop  bool              `json:"host_loopback,omitempty"`
	Mounts    []jsonMount       `json:"mounts"`
	Captures  []string          `json:"captures"`
	Changeset string            `json:"changeset,omitempty"`
	Apply     bool              `json:"apply,omitempty"`
	Caches    []Cache           `json:"caches"`
	Secrets   []Secret          `json:"secrets"`
	Limits    map[string]any    `json:"limits"`
	Caps      []string          `json:"capabilities"`
	Env       []jsonEnv         `json:"env"`
	Hooks     []Hook            `json:"pre_run"`
	HostAllow []string          `json:"host_allow,omitempty"`
	Blocked   []string          `json:"host_blocked_env,omitempty"`
	Refused   []string          `json:"host_unenforced,omitempty"` // limits the host cannot enforce: run refuses
	System    *System           `json:"system,omitempty"`
	Layers    []string          `json:"layers,omitempty"`
	Roots     []string          `json:"changeset_roots"`
	Audit     Audit             `json:"audit"`
	Refusal   string            `json:"refused,omitempty"` // what run would refuse the plan for
	Image     *ImagePolicy      `json:"image_policy,omitempty"`
	Sources   map[string]string `json:"sources"`
}

// JSON writes the plan as one JSON document, secrets masked.
func (p *Plan) JSON(w io.Writer) error {
	out := jsonPlan{
		Command: p.Command.Args, Mode: p.Mode, Backend: p.Backend, Reason: p.BackendReason,
		Workdir: p.Command.Dir, Caches: orEmpty(p.Caches), Secrets: orEmpty(p.Secrets), Hooks: orEmpty(p.Hooks),
		Captures: orEmpty(p.Captures), Changeset: p.Changeset, Apply: p.Apply,
		Audit: p.Audit, Refusal: p.Refused, Sources: p.Sources, Caps: orEmpty(p.Sandbox.Capabilities),
		Mounts: []jsonMount{}, Env: []jsonEnv{}, System: p.System, Layers: p.Layers, Roots: orEmpty(p.ChangesetRoots()),
		Limits: p.jsonLimits(),
	}
	if p.Image.RequirePinned || p.Image.Verify {
		out.Image = &p.Image
	}
	if p.Mode == "host" {
		out.HostAllow, out.Blocked = p.HostAllow, p.HostBlocked
		out.Refused = p.HostUnenforced()
	} else {
		sp := &p.Sandbox
		out.Base = string(sp.Base.Kind)
		if sp.Base.Path != "" {
			out.Base += ":" + sp.Base.Path
		}
		out.Workspace, out.Access, out.Root = sp.Workspace, string(sp.Access), sp.Root
		out.Hostname, out.Network = sp.Hostname, string(sp.Network)
		out.Allow, out.Deny, out.Ports, out.DNS, out.HostLoop = sp.Net.Allow, sp.Net.Deny, sp.Net.Publish, sp.Net.DNS, sp.Net.HostLoopback
		for _, m := range p.userMounts() {
			out.Mounts = append(out.Mounts, jsonMount{m.Source, m.Target, m.ReadOnly})
		}
	}
	for _, v := range p.Command.Env {
		e := jsonEnv{Name: v.Name, Value: v.Value, From: v.From}
		if v.Secret {
			e.Value, e.Masked = masked, true
		}
		out.Env = append(out.Env, e)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(&out)
}

// jsonLimits are the limits the JSON plan shows: those set, and in a
// sandbox its /tmp and disk.
func (p *Plan) jsonLimits() map[string]any {
	l := &p.Sandbox.Limits
	lim := map[string]any{}
	if p.Mode != "host" {
		lim["tmp_size"] = l.TmpSize
		if p.Disk > 0 {
			lim["disk"] = p.Disk
		}
	}
	if l.Memory > 0 {
		lim["memory"] = l.Memory
	}
	if l.Pids > 0 {
		lim["pids"] = l.Pids
	}
	if l.CPUs > 0 {
		lim["cpus"] = l.CPUs
	}
	if p.Timeout > 0 {
		lim["timeout_s"] = p.Timeout.Seconds()
	}
	return lim
}

// orEmpty is s, or an empty slice for nil: the JSON plan's lists are
// never null.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func orElse(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

func orNone(ok bool, s string) string {
	if ok {
		return s
	}
	return "none"
}

func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`|&;<>()*?[]#~") {
			a = strconv.Quote(a)
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}
