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
	src := func(key string) string {
		if s, ok := p.Sources[key]; ok && s != FromDefault {
			return "  (" + s + ")"
		}
		return ""
	}
	sp := &p.Sandbox
	fmt.Fprintf(w, "command:    %s\n", quoteArgs(p.Command.Args))
	fmt.Fprintf(w, "mode:       %s\n", p.Mode)
	backend := p.Backend
	if p.BackendReason != "" {
		backend += " (" + p.BackendReason + ")"
	}
	fmt.Fprintf(w, "backend:    %s%s\n", backend, src("backend"))
	if p.Mode == "host" {
		fmt.Fprintf(w, "host allow: %s%s\n", strings.Join(p.HostAllow, ", "), src("host"))
		fmt.Fprintf(w, "blocked:    %s\n", strings.Join(p.HostBlocked, " "))
		fmt.Fprintf(w, "limits:\n")
		for _, u := range p.HostUnenforced() {
			fmt.Fprintf(w, "  %s: the host cannot enforce it; pinfold run refuses this plan (PF143)\n", u)
		}
		fmt.Fprintf(w, "  timeout:  %s%s\n", orNone(p.Timeout > 0, p.Timeout.String()), src("limits.timeout"))
	} else {
		base := string(sp.Base.Kind)
		if sp.Base.Path != "" {
			base += ":" + sp.Base.Path
		}
		if sp.Base.Ref != "" {
			base += ":" + sp.Base.Ref
		}
		fmt.Fprintf(w, "base:       %s%s\n", base, src("base"))
		if sys := p.System; sys != nil {
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
		fmt.Fprintf(w, "workspace:  %s (%s)  (%s)\n", sp.Workspace, sp.Access, p.Sources["workspace"])
		if roots := p.ChangesetRoots(); len(roots) > 0 {
			if p.Changeset != "" {
				fmt.Fprintf(w, "changeset:  on top of %s, keeping the writes to %s\n", p.Changeset, strings.Join(roots, ", "))
			} else {
				fmt.Fprintf(w, "changeset:  new, keeping the writes to %s in pinfold's store\n", strings.Join(roots, ", "))
			}
		}
		for _, c := range p.Captures {
			fmt.Fprintf(w, "capture:    %s (writes kept in the changeset)%s\n", c, src("capture"))
		}
		if p.Apply {
			fmt.Fprintf(w, "apply:      when the command succeeds\n")
		}
		fmt.Fprintf(w, "workdir:    %s%s\n", p.Command.Dir, src("workdir"))
		user := "invoking user"
		if sp.Root {
			user = "root (in the user namespace)"
		}
		fmt.Fprintf(w, "user:       %s%s\n", user, src("user"))
		fmt.Fprintf(w, "hostname:   %s%s\n", sp.Hostname, src("hostname"))
		fmt.Fprintf(w, "network:    %s%s\n", sp.Network, src("network"))
		n := &sp.Net
		for _, l := range []struct {
			key  string
			list []string
		}{{"allow", n.Allow}, {"deny", n.Deny}, {"ports", n.Publish}, {"dns", n.DNS}} {
			if len(l.list) > 0 {
				fmt.Fprintf(w, "  %-10s%s%s\n", l.key+":", strings.Join(l.list, ", "), src(l.key))
			}
		}
		if n.HostLoopback {
			fmt.Fprintf(w, "  host loopback: at 10.0.2.2%s\n", src("host_loopback"))
		}
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
		fmt.Fprintf(w, "limits:\n")
		l := sp.Limits
		fmt.Fprintf(w, "  memory:   %s%s\n", orNone(l.Memory > 0, units.FormatSize(l.Memory)), src("limits.memory"))
		fmt.Fprintf(w, "  pids:     %s%s\n", orNone(l.Pids > 0, strconv.FormatInt(l.Pids, 10)), src("limits.pids"))
		fmt.Fprintf(w, "  cpus:     %s%s\n", orNone(l.CPUs > 0, strconv.FormatFloat(l.CPUs, 'g', -1, 64)), src("limits.cpus"))
		fmt.Fprintf(w, "  timeout:  %s%s\n", orNone(p.Timeout > 0, p.Timeout.String()), src("limits.timeout"))
		fmt.Fprintf(w, "  /tmp:     %s%s\n", units.FormatSize(l.TmpSize), src("limits.tmp_size"))
		if p.Disk > 0 {
			fmt.Fprintf(w, "  disk:     %s, changeset and /tmp together%s\n", units.FormatSize(p.Disk), src("limits.disk"))
		}
		fmt.Fprintf(w, "security:\n")
		caps := "none"
		if len(sp.Capabilities) > 0 {
			caps = strings.Join(sp.Capabilities, ", ")
		}
		fmt.Fprintf(w, "  namespaces: user, mount, pid, ipc, uts, cgroup%s\n", map[bool]string{true: ", net", false: ""}[sp.Network != sandbox.NetworkHost])
		fmt.Fprintf(w, "  capabilities: %s%s\n", caps, src("cap_add"))
		fmt.Fprintf(w, "  no_new_privs, seccomp filter, read-only root, own /proc /dev /tmp\n")
		if len(p.Layers) > 0 {
			fmt.Fprintf(w, "  layers: %s\n", strings.Join(p.Layers, ", "))
		}
	}
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
	a := p.Audit
	fmt.Fprintf(w, "audit:\n")
	fmt.Fprintf(w, "  config:   %s\n", orNone(a.Config != "", a.Config))
	if a.ConfigIgnored != "" {
		fmt.Fprintf(w, "  ignored:  %s\n", a.ConfigIgnored)
	}
	fmt.Fprintf(w, "  profile:  %s\n", orNone(a.Profile != "", a.Profile))
	fmt.Fprintf(w, "  rule:     %s\n", orNone(a.Rule != "", a.Rule))
	fmt.Fprintf(w, "  role:     %s%s\n", a.Role, src("role"))
	fmt.Fprintf(w, "  lockfile: %s\n", a.Lockfile)
	if p.Mode != "host" {
		fmt.Fprintf(w, "  trust:    %s: %s\n", a.TrustLevel, a.Trust)
		if ip := p.Image; ip.RequirePinned || ip.Verify {
			var what []string
			if ip.RequirePinned {
				what = append(what, "pinned digest required"+src("require_pinned_image"))
			}
			if ip.Verify {
				what = append(what, "cosign signature checked before use with "+strings.Join(ip.Keys, ", ")+src("verify_signature"))
			}
			fmt.Fprintf(w, "  image:    %s\n", strings.Join(what, "; "))
		}
	}
	if p.Refused != "" {
		fmt.Fprintf(w, "refused: run would refuse this plan: %s\n", p.Refused)
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

// JSON writes the plan as one JSON document, secrets masked.
func (p *Plan) JSON(w io.Writer) error {
	type env struct {
		Name   string `json:"name"`
		Value  string `json:"value"`
		From   string `json:"from"`
		Masked bool   `json:"masked,omitempty"`
	}
	type mount struct {
		Source   string `json:"source"`
		Target   string `json:"target"`
		ReadOnly bool   `json:"readonly"`
	}
	out := struct {
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
		Mounts    []mount           `json:"mounts"`
		Captures  []string          `json:"captures"`
		Changeset string            `json:"changeset,omitempty"`
		Apply     bool              `json:"apply,omitempty"`
		Caches    []Cache           `json:"caches"`
		Secrets   []Secret          `json:"secrets"`
		Limits    map[string]any    `json:"limits"`
		Caps      []string          `json:"capabilities"`
		Env       []env             `json:"env"`
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
	}{
		Command: p.Command.Args, Mode: p.Mode, Backend: p.Backend, Reason: p.BackendReason,
		Workdir: p.Command.Dir, Caches: p.Caches, Secrets: p.Secrets, Hooks: p.Hooks,
		Captures: p.Captures, Changeset: p.Changeset, Apply: p.Apply,
		Audit: p.Audit, Refusal: p.Refused, Sources: p.Sources, Caps: p.Sandbox.Capabilities,
		Mounts: []mount{}, Env: []env{}, System: p.System, Layers: p.Layers, Roots: p.ChangesetRoots(),
	}
	if p.Image.RequirePinned || p.Image.Verify {
		out.Image = &p.Image
	}
	if out.Roots == nil {
		out.Roots = []string{}
	}
	if out.Captures == nil {
		out.Captures = []string{}
	}
	if out.Caches == nil {
		out.Caches = []Cache{}
	}
	if out.Secrets == nil {
		out.Secrets = []Secret{}
	}
	if out.Hooks == nil {
		out.Hooks = []Hook{}
	}
	if out.Caps == nil {
		out.Caps = []string{}
	}
	if p.Mode == "host" {
		out.HostAllow, out.Blocked = p.HostAllow, p.HostBlocked
		l := &p.Sandbox.Limits
		out.Limits = map[string]any{}
		if l.Memory > 0 {
			out.Limits["memory"] = l.Memory
		}
		if l.Pids > 0 {
			out.Limits["pids"] = l.Pids
		}
		if l.CPUs > 0 {
			out.Limits["cpus"] = l.CPUs
		}
		if p.Timeout > 0 {
			out.Limits["timeout_s"] = p.Timeout.Seconds()
		}
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
			out.Mounts = append(out.Mounts, mount{m.Source, m.Target, m.ReadOnly})
		}
		out.Limits = map[string]any{"tmp_size": sp.Limits.TmpSize}
		if p.Disk > 0 {
			out.Limits["disk"] = p.Disk
		}
		if sp.Limits.Memory > 0 {
			out.Limits["memory"] = sp.Limits.Memory
		}
		if sp.Limits.Pids > 0 {
			out.Limits["pids"] = sp.Limits.Pids
		}
		if sp.Limits.CPUs > 0 {
			out.Limits["cpus"] = sp.Limits.CPUs
		}
		if p.Timeout > 0 {
			out.Limits["timeout_s"] = p.Timeout.Seconds()
		}
	}
	for _, v := range p.Command.Env {
		e := env{Name: v.Name, Value: v.Value, From: v.From}
		if v.Secret {
			e.Value, e.Masked = masked, true
		}
		out.Env = append(out.Env, e)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(&out)
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
