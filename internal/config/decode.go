package config

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"
	"sync"
)

// decoder turns the node tree of a pinfold.yaml into a File, checking
// every key and value on the way.
type decoder struct {
	p *parser
}

// where names a place in the file for messages.
type where struct {
	profile string // "" at the top level
	section string // "limits", "caches item"...
}

func (w where) String() string {
	switch {
	case w.section == "" && w.profile == "":
		return "at the top level"
	case w.section == "":
		return "in profile " + strconv.Quote(w.profile)
	case w.profile == "":
		return "in " + w.section
	}
	return "in " + w.section + " of profile " + strconv.Quote(w.profile)
}

func (w where) in(section string) where { return where{profile: w.profile, section: section} }

func (d *decoder) errorf(pos Pos, format string, a ...any) *Error {
	e := &Error{Path: d.p.path, Pos: pos, Msg: fmt.Sprintf(format, a...)}
	if pos.Line >= 1 && pos.Line <= len(d.p.lines) {
		l := &d.p.lines[pos.Line-1]
		e.Line = d.p.src[l.off:l.end]
	}
	return e
}

func (d *decoder) unknown(k *node, w where, allowed []string) *Error {
	msg := fmt.Sprintf("unknown key %q %s", k.value, w)
	if s := suggest(k.value, allowed); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	e := d.errorf(k.pos, "%s", msg)
	e.Allowed = append([]string(nil), allowed...)
	return e
}

// file decodes the document.
func (d *decoder) file(root *node) (*File, error) {
	if root.null {
		return nil, d.errorf(root.pos, "the file is empty; it starts with \"version: %d\"", Version)
	}
	if root.kind != mapNode {
		return nil, d.errorf(root.pos, "the file must be a mapping of keys (version: %d, profiles:, ...)", Version)
	}
	f := &File{}
	var profiles, dispatch *node
	for i := 0; i < len(root.items); i += 2 {
		if k, v := &root.items[i], &root.items[i+1]; k.value == "version" {
			n, err := d.integer(v, "version")
			if err != nil {
				return nil, err
			}
			if n != Version {
				return nil, d.errorf(v.pos, "unsupported version %d: this pinfold reads version %d", n, Version)
			}
			f.Version = Version
		}
	}
	if f.Version == 0 {
		return nil, d.errorf(root.pos, "missing \"version: %d\" (the format version) at the top level", Version)
	}
	top := where{}
	f.Settings.Pos = make(map[string]Pos, posCount(root))
	for i := 0; i < len(root.items); i += 2 {
		k, v := &root.items[i], &root.items[i+1]
		switch k.value {
		case "version":
		case "profiles":
			profiles = v
		case "dispatch":
			dispatch = v
		case "pack":
			var err error
			if f.Pack, err = d.pack(k, v); err != nil {
				return nil, err
			}
		case "mcp":
			var err error
			if f.MCP, err = d.mcp(k, v); err != nil {
				return nil, err
			}
		default:
			ok, err := d.setting(&f.Settings, k, v, top)
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, d.unknown(k, top, topKeys[:])
			}
		}
	}
	if profiles != nil {
		if err := d.profiles(f, profiles); err != nil {
			return nil, err
		}
	}
	if dispatch != nil {
		if err := d.dispatch(f, dispatch); err != nil {
			return nil, err
		}
	}
	if err := d.checkLockfiles(&f.Settings, nil); err != nil {
		return nil, err
	}
	if err := d.checkNetwork(&f.Settings, nil); err != nil {
		return nil, err
	}
	for i := range f.Profiles {
		if err := d.checkLockfiles(&f.Profiles[i].Settings, &f.Settings); err != nil {
			return nil, err
		}
		if err := d.checkNetwork(&f.Profiles[i].Settings, &f.Settings); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// checkNetwork refuses, when the file is read, a layer (a profile over the
// top level) whose network contradicts its lists: allow with nothing to
// allow, ports with the host's network. Flags may still change either.
func (d *decoder) checkNetwork(s, top *Settings) error {
	if s.Network == nil {
		return nil
	}
	allow, ports := s.Allow, s.Ports
	if top != nil {
		if allow == nil {
			allow = top.Allow
		}
		if ports == nil {
			ports = top.Ports
		}
	}
	switch {
	case *s.Network == "allow" && len(allow) == 0:
		return d.errorf(s.Pos["network"], "network: allow lets out only what allow lists, and no allow list is given; add allow: [registry.example.org, ...], or use network: outbound")
	case *s.Network == "host" && len(ports) > 0:
		return d.errorf(s.Pos["network"], "network: host has the host's ports already; ports forward into a sandbox's own network (none, outbound or allow)")
	}
	return nil
}

// pack decodes the top-level pack: section.
func (d *decoder) pack(key, v *node) (*Pack, error) {
	if err := d.want(v, mapNode, "pack", "a mapping (entrypoint:, cmd:, tag:)"); err != nil {
		return nil, err
	}
	p := &Pack{Pos: key.pos}
	for i := 0; i < len(v.items); i += 2 {
		k, pv := &v.items[i], &v.items[i+1]
		var err error
		switch k.value {
		case "entrypoint":
			p.Entrypoint, err = d.strings(pv, "pack.entrypoint", anyString)
		case "cmd":
			p.Cmd, err = d.strings(pv, "pack.cmd", anyString)
		case "tag":
			p.Tag, err = d.scalar(pv, "pack.tag")
		default:
			return nil, d.unknown(k, where{section: "pack"}, packKeys[:])
		}
		if err != nil {
			return nil, err
		}
	}
	return p, nil
}

// mcp decodes the top-level mcp: section.
func (d *decoder) mcp(key, v *node) (*MCP, error) {
	if err := d.want(v, mapNode, "mcp", "a mapping (apply:)"); err != nil {
		return nil, err
	}
	m := &MCP{Pos: key.pos}
	for i := 0; i < len(v.items); i += 2 {
		k, mv := &v.items[i], &v.items[i+1]
		if k.value != "apply" {
			return nil, d.unknown(k, where{section: "mcp"}, mcpKeys[:])
		}
		var err error
		if m.Apply, err = d.boolean(mv, "mcp.apply"); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// checkLockfiles refuses require_lockfile: true where no lockfile_files
// apply (the settings' own, else the top level's).
func (d *decoder) checkLockfiles(s, top *Settings) error {
	if s.RequireLockfile == nil || !*s.RequireLockfile {
		return nil
	}
	files := s.LockfileFiles
	if files == nil && top != nil {
		files = top.LockfileFiles
	}
	if len(files) == 0 {
		return d.errorf(s.Pos["require_lockfile"], "require_lockfile is true but no lockfile_files are listed")
	}
	return nil
}

func (d *decoder) profiles(f *File, m *node) error {
	if err := d.want(m, mapNode, "profiles", "a mapping of profile names to settings"); err != nil {
		return err
	}
	f.Profiles = make([]Profile, 0, len(m.items)/2)
	for i := 0; i < len(m.items); i += 2 {
		k, v := &m.items[i], &m.items[i+1]
		if !validName(k.value, true) {
			return d.errorf(k.pos, "invalid profile name %q: use letters, digits, '.', '_' and '-'", k.value)
		}
		if v.null {
			return d.errorf(v.pos, "profile %q has no settings; write \"%s: {}\" for a profile that changes nothing", k.value, k.value)
		}
		if v.kind != mapNode {
			return d.errorf(v.pos, "profile %q must be a mapping of settings", k.value)
		}
		p := Profile{Name: k.value, Pos: k.pos}
		if len(v.items) > 0 {
			p.Settings.Pos = make(map[string]Pos, posCount(v))
		}
		w := where{profile: k.value}
		for j := 0; j < len(v.items); j += 2 {
			sk, sv := &v.items[j], &v.items[j+1]
			switch sk.value {
			case "workspace":
				return d.errorf(sk.pos, "workspace cannot be set in a profile (profile %q): the workspace is chosen for the whole file; set it at the top level", k.value)
			case "version", "profiles", "dispatch":
				return d.errorf(sk.pos, "%q belongs at the top level, not in profile %q", sk.value, k.value)
			}
			ok, err := d.setting(&p.Settings, sk, sv, w)
			if err != nil {
				return err
			}
			if !ok {
				return d.unknown(sk, w, profileKeys[:])
			}
		}
		f.Profiles = append(f.Profiles, p)
	}
	return nil
}

func (d *decoder) dispatch(f *File, s *node) error {
	if err := d.want(s, seqNode, "dispatch", "a list of rules"); err != nil {
		return err
	}
	f.Dispatch = make([]Rule, 0, len(s.items))
	for i := range s.items {
		m := &s.items[i]
		w := where{section: "dispatch rule " + strconv.Itoa(i+1)}
		if m.null || m.kind != mapNode {
			return d.errorf(m.pos, "dispatch rule %d must be a mapping (match:, command: or regex:, and profile:)", i+1)
		}
		r := Rule{Pos: m.pos}
		var kinds []*node // which of match, command, regex are set
		var args, profile *node
		for j := 0; j < len(m.items); j += 2 {
			k, v := &m.items[j], &m.items[j+1]
			var err error
			switch k.value {
			case "match":
				if r.Match, err = d.scalar(v, "match"); err == nil {
					err = d.check(v, "match", checkGlob(r.Match))
				}
				kinds = append(kinds, k)
			case "command":
				if r.Command, err = d.scalar(v, "command"); err == nil {
					err = d.check(v, "command", checkCommand(r.Command))
				}
				kinds = append(kinds, k)
			case "regex":
				if r.Regex, err = d.scalar(v, "regex"); err == nil {
					if r.Regex == "" {
						err = d.errorf(v.pos, "regex is empty")
					} else if _, rerr := syntax.Parse(r.Regex, syntax.Perl); rerr != nil {
						err = d.errorf(v.pos, "invalid regex: %s", strings.TrimPrefix(rerr.Error(), "error parsing regexp: "))
					} else {
						r.re = &lazyRegex{}
					}
				}
				kinds = append(kinds, k)
			case "args":
				r.Args, err = d.strings(v, "args", checkGlob)
				args = k
			case "profile":
				r.Profile, err = d.scalar(v, "profile")
				profile = v
			default:
				return d.unknown(k, w, ruleKeys[:])
			}
			if err != nil {
				return err
			}
		}
		switch {
		case len(kinds) == 0:
			return d.errorf(m.pos, "dispatch rule %d needs one of match, command or regex", i+1)
		case len(kinds) > 1:
			return d.errorf(kinds[1].pos, "dispatch rule %d has both %s and %s; a rule takes one of match, command or regex", i+1, kinds[0].value, kinds[1].value)
		case args != nil && r.Command == "":
			return d.errorf(args.pos, "args go with command (command: npm, args: [install, \"*\"]); %s matches the whole command line", kinds[0].value)
		case profile == nil:
			return d.errorf(m.pos, "dispatch rule %d needs a profile", i+1)
		}
		if !f.hasProfile(r.Profile) {
			names := make([]string, len(f.Profiles))
			for j := range f.Profiles {
				names[j] = f.Profiles[j].Name
			}
			msg := fmt.Sprintf("unknown profile %q", r.Profile)
			if s := suggest(r.Profile, names); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			if len(names) == 0 {
				msg += "; no profiles are defined (profiles:)"
			} else {
				msg += "; defined: " + strings.Join(names, ", ")
			}
			return d.errorf(profile.pos, "%s", msg)
		}
		f.Dispatch = append(f.Dispatch, r)
	}
	return nil
}

// CompiledRegex returns the rule's Regex compiled, or nil when the rule
// has none. Decoding checks the syntax but leaves compiling to the first
// call (dispatch stops at the first match, so later rules' regexes need
// never be compiled); rules from Load and Parse compile once however
// often, and from several goroutines, CompiledRegex is called.
func (r *Rule) CompiledRegex() (*regexp.Regexp, error) {
	if r.Regex == "" {
		return nil, nil
	}
	if r.re == nil {
		return regexp.Compile(r.Regex) // a rule not made by Parse
	}
	r.re.once.Do(func() { r.re.re, r.re.err = regexp.Compile(r.Regex) })
	return r.re.re, r.re.err
}

// lazyRegex is a Rule's regex, compiled on first use.
type lazyRegex struct {
	once sync.Once
	re   *regexp.Regexp
	err  error
}

func (f *File) hasProfile(name string) bool {
	for i := range f.Profiles {
		if f.Profiles[i].Name == name {
			return true
		}
	}
	return false
}

// setting decodes one settings key into s; ok is false for a key that
// is not a setting.
func (d *decoder) setting(s *Settings, k, v *node, w where) (ok bool, err error) {
	name := k.value
	switch name {
	case "backend":
		s.Backend, err = d.enum(v, name, backendValues[:])
	case "base":
		s.Base, err = d.stringp(v, name, checkBase)
	case "access":
		s.Access, err = d.enum(v, name, accessValues[:])
	case "workspace":
		if w.profile != "" {
			return false, nil
		}
		s.Workspace, err = d.stringp(v, name, checkHostPath)
	case "workdir":
		s.Workdir, err = d.stringp(v, name, checkWorkdir)
	case "network":
		s.Network, err = d.enum(v, name, networkValues[:])
	case "allow", "deny":
		var list []string
		check := checkNetRule
		if name == "deny" {
			check = checkDenyRule
		}
		if list, err = d.strings(v, name, check); err == nil {
			if name == "allow" {
				s.Allow = list
			} else {
				s.Deny = list
			}
		}
	case "host_loopback":
		s.HostLoopback, err = d.boolp(v, name)
	case "require_pinned_image":
		s.RequirePinnedImage, err = d.boolp(v, name)
	case "verify_signature":
		s.VerifySignature, err = d.boolp(v, name)
	case "trusted_keys":
		s.TrustedKeys, err = d.strings(v, name, func(k string) string {
			if k == "" {
				return "an empty path"
			}
			return ""
		})
	case "ports":
		s.Ports, err = d.strings(v, name, checkPublish)
	case "dns":
		s.DNS, err = d.strings(v, name, checkDNS)
	case "user":
		s.User, err = d.stringp(v, name, checkUser)
	case "hostname":
		s.Hostname, err = d.stringp(v, name, checkHostname)
	case "mounts":
		s.Mounts, err = d.mounts(v, w)
	case "cap_add":
		s.CapAdd, err = d.strings(v, name, checkCapability)
	case "capabilities":
		s.Capabilities, err = d.strings(v, name, checkSystemCapability)
	case "auto":
		s.Auto, err = d.boolp(v, name)
	case "env":
		s.Env, err = d.env(s, k, v, w)
	case "caches":
		s.Caches, err = d.caches(v, w)
	case "secrets":
		s.Secrets, err = d.secrets(v, w)
	case "limits":
		s.Limits, err = d.limits(s, k, v, w)
	case "role":
		s.Role, err = d.enum(v, name, roleValues[:])
	case "capture":
		s.Capture, err = d.strings(v, name, checkHostPath)
	case "lockfile_files":
		s.LockfileFiles, err = d.strings(v, name, checkRelPath)
	case "require_lockfile":
		s.RequireLockfile, err = d.boolp(v, name)
	case "pre_run":
		s.PreRun, err = d.hooks(v)
	case "host":
		s.Host, err = d.host(s, k, v, w)
	default:
		return false, nil
	}
	if err != nil {
		return true, err
	}
	setPos(s, name, k.pos)
	return true, nil
}

// posCount returns how many positions the settings mapping m records
// (one per key, plus the keys inside env, limits and host), to size
// Settings.Pos at once.
func posCount(m *node) int {
	n := 0
	for i := 0; i < len(m.items); i += 2 {
		n++
		switch v := &m.items[i+1]; m.items[i].value {
		case "env", "limits", "host":
			if v.kind != mapNode {
				continue
			}
			n += len(v.items) / 2
			for j := 0; j < len(v.items); j += 2 {
				if set := &v.items[j+1]; v.items[j].value == "set" && set.kind == mapNode {
					n += len(set.items) / 2
				}
			}
		}
	}
	return n
}

func setPos(s *Settings, name string, pos Pos) {
	if s.Pos == nil {
		s.Pos = make(map[string]Pos, 8)
	}
	s.Pos[name] = pos
}
