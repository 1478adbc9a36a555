package plan

import (
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pinfold/pinfold/internal/config"
	"github.com/pinfold/pinfold/internal/disk"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/units"
	"github.com/pinfold/pinfold/sandbox"
)

// merger merges the layers into a plan: for each setting the highest
// layer that sets it wins (a list wins whole), and its label is the
// setting's source.
type merger struct {
	r  *Request
	ls []layer
	p  *Plan
}

// resolveSettings merges the layers into the plan, area by area; the
// order matters where a step reads what an earlier one set (the access
// for --changeset, --disk and --apply, the workspace for the workdir).
func resolveSettings(r *Request, ls []layer, p *Plan) error {
	m := &merger{r: r, ls: ls, p: p}
	for _, step := range []func() error{
		m.backend, m.base, m.workspace, m.identity, m.network, m.grants,
		func() error { return resolveLimits(ls, p) },
		m.checkWrites,
		func() error { return resolveCachesAndSecrets(r, ls, p) },
		m.workdir, m.host,
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// pick returns the highest layer's value of a string setting and that
// layer's index (-1: the default, "").
func (m *merger) pick(key string, get func(*config.Settings) *string) (string, int) {
	for i := len(m.ls) - 1; i >= 0; i-- {
		if v := get(m.ls[i].s); v != nil {
			m.p.Sources[key] = m.ls[i].label(key)
			return *v, i
		}
	}
	m.p.Sources[key] = FromDefault
	return "", -1
}

// list returns the highest layer's value of a list setting.
func (m *merger) list(key string, get func(*config.Settings) []string) []string {
	for i := len(m.ls) - 1; i >= 0; i-- {
		if v := get(m.ls[i].s); v != nil {
			m.p.Sources[key] = m.ls[i].label(key)
			return v
		}
	}
	return nil
}

// top returns the index of the highest layer for which set is true, -1
// for none, and records that layer as key's source.
func (m *merger) top(key string, set func(*config.Settings) bool) int {
	for i := len(m.ls) - 1; i >= 0; i-- {
		if set(m.ls[i].s) {
			m.p.Sources[key] = m.ls[i].label(key)
			return i
		}
	}
	return -1
}

func (m *merger) backend() error {
	p := m.p
	backend, _ := m.pick("backend", func(s *config.Settings) *string { return s.Backend })
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
	return nil
}

func (m *merger) base() error {
	p, sp := m.p, &m.p.Sandbox
	base, bl := m.pick("base", func(s *config.Settings) *string { return s.Base })
	var err error
	if sp.Base, err = parseBase(base, layerDir(m.ls, bl, m.r.Cwd), m.r.Home); err != nil {
		return err
	}
	p.Audit.Trust = trustOf(sp.Base)
	p.Audit.TrustLevel = trustLevel(sp.Base)
	return resolveImagePolicy(m.r, m.ls, p)
}

// workspace resolves the workspace, the access to it, the captures and
// --changeset.
func (m *merger) workspace() error {
	r, p, sp := m.r, m.p, &m.p.Sandbox
	ws, wl := m.pick("workspace", func(s *config.Settings) *string { return s.Workspace })
	switch {
	case wl >= 0:
		sp.Workspace = hostPath(ws, m.ls[wl].dir, r.Home)
	case r.Config != nil:
		sp.Workspace, p.Sources["workspace"] = filepath.Dir(r.Config.Path), "directory of "+filepath.Base(r.Config.Path)
	default:
		sp.Workspace, p.Sources["workspace"] = r.Cwd, FromCwd
	}

	access, _ := m.pick("access", func(s *config.Settings) *string { return s.Access })
	switch a := sandbox.Access(access); a {
	case "":
		sp.Access = sandbox.AccessChangeset
	case sandbox.AccessChangeset, sandbox.AccessReadWrite, sandbox.AccessReadOnly, sandbox.AccessNone:
		sp.Access = a
	default:
		return badValue("access", access, "changeset, rw, ro or none")
	}
	if i := m.top("capture", func(s *config.Settings) bool { return s.Capture != nil }); i >= 0 {
		for _, c := range m.ls[i].s.Capture {
			p.Captures = append(p.Captures, hostPath(c, m.ls[i].dir, r.Home))
		}
	}
	p.Changeset, p.Apply = r.Flags.Changeset, r.Flags.Apply
	if p.Changeset != "" && sp.Access != sandbox.AccessChangeset {
		return badValue("--changeset", p.Changeset, "--changeset with the changeset access (not --access "+access+")")
	}
	return nil
}

// identity resolves who the command runs as and the sandbox's hostname.
func (m *merger) identity() error {
	sp := &m.p.Sandbox
	user, _ := m.pick("user", func(s *config.Settings) *string { return s.User })
	switch user {
	case "":
	case "root", "0", "0:0":
		sp.Root = true
	default:
		return badValue("user", user, "root (the invoking user's ids are the default)")
	}

	host, _ := m.pick("hostname", func(s *config.Settings) *string { return s.Hostname })
	sp.Hostname = host
	if host == "" {
		sp.Hostname = sandbox.DefaultHostname
	} else if !validHostname(host) {
		return badValue("hostname", host, "letters, digits, '-' and '.', at most 64 characters")
	}
	return nil
}

func (m *merger) network() error {
	p, sp := m.p, &m.p.Sandbox
	network, netLayer := m.pick("network", func(s *config.Settings) *string { return s.Network })
	switch n := sandbox.Network(network); n {
	case "":
		sp.Network = sandbox.NetworkNone
	case sandbox.NetworkNone, sandbox.NetworkHost, sandbox.NetworkOutbound, sandbox.NetworkAllow:
		sp.Network = n
	default:
		return badValue("network", network, "none, host, outbound or allow")
	}
	sp.Net.Allow = m.list("allow", func(s *config.Settings) []string { return s.Allow })
	sp.Net.Deny = m.list("deny", func(s *config.Settings) []string { return s.Deny })
	sp.Net.Publish = m.list("ports", func(s *config.Settings) []string { return s.Ports })
	sp.Net.DNS = m.list("dns", func(s *config.Settings) []string { return s.DNS })
	if i := m.top("host_loopback", func(s *config.Settings) bool { return s.HostLoopback != nil }); i >= 0 {
		sp.Net.HostLoopback = *m.ls[i].s.HostLoopback
	}
	if len(sp.Net.Allow) > 0 && netLayer < 0 {
		// An allow list with no network chosen means that list.
		sp.Network = sandbox.NetworkAllow
		p.Sources["network"] = p.Sources["allow"]
	}
	return checkNetwork(sp)
}

// grants resolves what the sandbox is given beyond its base: mounts,
// capability packages (and whether to infer them), and kernel
// capabilities.
func (m *merger) grants() error {
	p, sp := m.p, &m.p.Sandbox
	if i := m.top("mounts", func(s *config.Settings) bool { return s.Mounts != nil }); i >= 0 {
		for _, mt := range m.ls[i].s.Mounts {
			sp.Mounts = append(sp.Mounts, sandbox.Mount{Source: hostPath(mt.Source, m.ls[i].dir, m.r.Home),
				Target: filepath.Clean(mt.Target), ReadOnly: mt.ReadOnly})
		}
	}
	p.Capabilities = m.list("capabilities", func(s *config.Settings) []string { return s.Capabilities })
	p.Auto = true
	if i := m.top("auto", func(s *config.Settings) bool { return s.Auto != nil }); i >= 0 {
		p.Auto = *m.ls[i].s.Auto
	}
	if i := m.top("cap_add", func(s *config.Settings) bool { return s.CapAdd != nil }); i >= 0 {
		sp.Capabilities = m.ls[i].s.CapAdd
	}
	return nil
}

// checkWrites refuses flags that ask for what this run does not have:
// --disk and --apply without a changeset, --allow and --deny without a
// network of the sandbox's own.
func (m *merger) checkWrites() error {
	p, sp := m.p, &m.p.Sandbox
	if p.Disk > 0 && sp.Access != sandbox.AccessChangeset && len(p.Captures) == 0 {
		return usageFault("--disk caps what a changeset keeps, and this run has none",
			"with --access "+string(sp.Access)+" the command writes straight to the workspace",
			"run with --access changeset, or cap /tmp alone with --tmp-size")
	}
	if p.Apply && sp.Access != sandbox.AccessChangeset && len(p.Captures) == 0 {
		return usageFault("--apply applies a changeset, and this run has none",
			"with --access "+string(sp.Access)+" the command writes straight to the workspace, or not at all",
			"drop --apply, or run with --access changeset")
	}
	if f := &m.r.Flags; (f.Network == "none" || f.Network == "host") && len(f.Allow)+len(f.Deny) > 0 {
		// On one command line, a contradiction (in files, a profile may
		// change the mode of a list the top level sets).
		return usageFault("--allow and --deny filter the sandbox's own network, and --network "+f.Network+" has none to filter",
			"", "drop them, or use --network allow (only what --allow names) or outbound")
	}
	return nil
}

// usageFault is a PF-coded bad value that exits as a usage error.
func usageFault(what, why, fix string) error {
	e := fault.New(fault.BadValue, what, why, fix, nil)
	e.Exit = fault.ExitUsage
	return e
}

// workdir resolves the command's working directory: the workspace, or
// the caller's directory when it lies in it.
func (m *merger) workdir() error {
	r, p, sp := m.r, m.p, &m.p.Sandbox
	workdir, _ := m.pick("workdir", func(s *config.Settings) *string { return s.Workdir })
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
	return nil
}

// host resolves what a run on the host may do, and the terminal flags.
func (m *merger) host() error {
	p := m.p
	if i := m.top("host", func(s *config.Settings) bool { return s.Host != nil }); i >= 0 {
		h := m.ls[i].s.Host
		p.HostAllow = h.Allow
		p.HostBlocked = append(p.HostBlocked, h.BlockEnv...)
	}
	p.HostBlocked = append(append([]string(nil), hostBlockedDefault[:]...), p.HostBlocked...)
	p.TTY, p.Interactive = m.r.Flags.TTY, m.r.Flags.Interactive
	return nil
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
