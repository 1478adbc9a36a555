package config

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"
	"sync"

	"github.com/pinfold/pinfold/internal/units"
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
		var b bool
		if b, err = d.boolean(v, name); err == nil {
			s.HostLoopback = &b
		}
	case "require_pinned_image", "verify_signature":
		var b bool
		if b, err = d.boolean(v, name); err == nil {
			if name == "verify_signature" {
				s.VerifySignature = &b
			} else {
				s.RequirePinnedImage = &b
			}
		}
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
		var b bool
		if b, err = d.boolean(v, name); err == nil {
			s.Auto = &b
		}
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
		var b bool
		if b, err = d.boolean(v, name); err == nil {
			s.RequireLockfile = &b
		}
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

// want checks that v is a collection of kind k.
func (d *decoder) want(v *node, k kind, key, what string) error {
	switch {
	case v.null:
		empty := "{}"
		if k == seqNode {
			empty = "[]"
		}
		return d.errorf(v.pos, "%s has no value; it takes %s (write %s for none)", key, what, empty)
	case v.kind != k:
		return d.errorf(v.pos, "%s must be %s, not %s", key, what, describe(v))
	}
	return nil
}

// describe names what a node is, for messages.
func describe(v *node) string {
	switch v.kind {
	case mapNode:
		return "a mapping"
	case seqNode:
		return "a list"
	}
	return "a single value"
}

// isNullWord reports the plain scalars YAML reads as null.
func isNullWord(s string) bool {
	return s == "~" || s == "null" || s == "Null" || s == "NULL"
}

// scalar returns the text of a single value.
func (d *decoder) scalar(v *node, key string) (string, error) {
	switch {
	case v.null:
		return "", d.errorf(v.pos, "%s has no value", key)
	case v.kind != scalarNode:
		return "", d.errorf(v.pos, "%s must be a single value, not %s", key, describe(v))
	case v.style == plainStyle && isNullWord(v.value):
		return "", d.errorf(v.pos, "%s: %s means \"no value\" in YAML; leave the key out, or quote it if you mean the text", key, v.value)
	}
	return v.value, nil
}

// check turns a problem found by a checker into an error at v.
func (d *decoder) check(v *node, key, problem string) error {
	if problem == "" {
		return nil
	}
	return d.errorf(v.pos, "invalid %s %q: %s", key, v.value, problem)
}

// stringp decodes a single value that check accepts.
func (d *decoder) stringp(v *node, key string, check func(string) string) (*string, error) {
	s, err := d.scalar(v, key)
	if err != nil {
		return nil, err
	}
	if err := d.check(v, key, check(s)); err != nil {
		return nil, err
	}
	return &s, nil
}

// enum decodes one of a few words.
func (d *decoder) enum(v *node, key string, values []string) (*string, error) {
	s, err := d.scalar(v, key)
	if err != nil {
		return nil, err
	}
	for _, ok := range values {
		if s == ok {
			return &s, nil
		}
	}
	msg := fmt.Sprintf("invalid %s %q", key, s)
	if sg := suggest(s, values); sg != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", sg)
	}
	return nil, d.errorf(v.pos, "%s; allowed: %s", msg, strings.Join(values, ", "))
}

// strings decodes a list of single values, each accepted by check.
func (d *decoder) strings(v *node, key string, check func(string) string) ([]string, error) {
	if err := d.want(v, seqNode, key, "a list"); err != nil {
		return nil, err
	}
	list := make([]string, 0, len(v.items))
	for i := range v.items {
		it := &v.items[i]
		s, err := d.scalar(it, key+" item")
		if err != nil {
			return nil, err
		}
		if problem := check(s); problem != "" {
			return nil, d.errorf(it.pos, "invalid %s item %q: %s", key, s, problem)
		}
		list = append(list, s)
	}
	return list, nil
}

// boolean decodes true or false, written plain.
func (d *decoder) boolean(v *node, key string) (bool, error) {
	if v.kind == scalarNode && !v.null && v.style == plainStyle {
		switch v.value {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
	}
	if v.kind == scalarNode && !v.null {
		return false, d.errorf(v.pos, "%s must be true or false, not %q", key, v.value)
	}
	return false, d.errorf(v.pos, "%s must be true or false", key)
}

// integer decodes a decimal integer, written plain.
func (d *decoder) integer(v *node, key string) (int64, error) {
	if v.kind == scalarNode && !v.null && v.style == plainStyle && isDigits(v.value) {
		if n, err := strconv.ParseInt(v.value, 10, 64); err == nil {
			return n, nil
		}
		return 0, d.errorf(v.pos, "%s: %s is too large", key, v.value)
	}
	if v.kind == scalarNode && !v.null {
		return 0, d.errorf(v.pos, "%s must be a whole number, not %q", key, v.value)
	}
	return 0, d.errorf(v.pos, "%s must be a whole number", key)
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// number decodes a decimal number (2, 0.5), written plain.
func (d *decoder) number(v *node, key string) (float64, error) {
	if v.kind == scalarNode && !v.null && v.style == plainStyle {
		whole, frac, dot := strings.Cut(v.value, ".")
		if (whole == "" || isDigits(whole)) && (!dot || isDigits(frac)) && whole+frac != "" {
			if f, err := strconv.ParseFloat(v.value, 64); err == nil {
				return f, nil
			}
		}
	}
	if v.kind == scalarNode && !v.null {
		return 0, d.errorf(v.pos, "%s must be a number like 2 or 0.5, not %q", key, v.value)
	}
	return 0, d.errorf(v.pos, "%s must be a number like 2 or 0.5", key)
}

func (d *decoder) mounts(v *node, w where) ([]Mount, error) {
	if err := d.want(v, seqNode, "mounts", "a list"); err != nil {
		return nil, err
	}
	list := make([]Mount, 0, len(v.items))
	for i := range v.items {
		it := &v.items[i]
		m := Mount{Pos: it.pos}
		switch {
		case it.kind == mapNode:
			var src, dst bool
			for j := 0; j < len(it.items); j += 2 {
				k, mv := &it.items[j], &it.items[j+1]
				var err error
				switch k.value {
				case "source":
					if m.Source, err = d.scalar(mv, "source"); err == nil {
						err = d.check(mv, "source", checkHostPath(m.Source))
					}
					src = true
				case "target":
					if m.Target, err = d.scalar(mv, "target"); err == nil {
						err = d.check(mv, "target", checkInsidePath(m.Target))
					}
					dst = true
				case "readonly":
					m.ReadOnly, err = d.boolean(mv, "readonly")
				default:
					return nil, d.unknown(k, w.in("a mount"), mountKeys[:])
				}
				if err != nil {
					return nil, err
				}
			}
			if !src || !dst {
				return nil, d.errorf(it.pos, "a mount needs a source and a target")
			}
		default:
			s, err := d.scalar(it, "mounts item")
			if err != nil {
				return nil, err
			}
			parts := strings.Split(s, ":")
			switch {
			case len(parts) == 3 && (parts[2] == "ro" || parts[2] == "rw"):
				m.ReadOnly = parts[2] == "ro"
			case len(parts) == 2:
			default:
				return nil, d.errorf(it.pos, "invalid mount %q: use SRC:DST, SRC:DST:ro or SRC:DST:rw (or source:, target:, readonly:)", s)
			}
			m.Source, m.Target = parts[0], parts[1]
			if p := checkHostPath(m.Source); p != "" {
				return nil, d.errorf(it.pos, "invalid mount %q: source: %s", s, p)
			}
			if p := checkInsidePath(m.Target); p != "" {
				return nil, d.errorf(it.pos, "invalid mount %q: target: %s", s, p)
			}
		}
		list = append(list, m)
	}
	return list, nil
}

func (d *decoder) env(s *Settings, key, v *node, w where) (*EnvPolicy, error) {
	if err := d.want(v, mapNode, "env", "a mapping (pass:, set:, deny:)"); err != nil {
		return nil, err
	}
	e := &EnvPolicy{Pos: key.pos}
	for i := 0; i < len(v.items); i += 2 {
		k, ev := &v.items[i], &v.items[i+1]
		var err error
		switch k.value {
		case "pass":
			e.Pass, err = d.strings(ev, "env.pass", checkNameGlob)
		case "deny":
			e.Deny, err = d.strings(ev, "env.deny", checkNameGlob)
		case "set":
			err = d.envSet(s, e, ev)
		default:
			return nil, d.unknown(k, w.in("env"), envKeys[:])
		}
		if err != nil {
			return nil, err
		}
		setPos(s, "env."+k.value, k.pos)
	}
	return e, nil
}

func (d *decoder) envSet(s *Settings, e *EnvPolicy, v *node) error {
	if err := d.want(v, mapNode, "env.set", "a mapping of variable names to values"); err != nil {
		return err
	}
	e.Set = make(map[string]string, len(v.items)/2)
	e.SetOrder = make([]string, 0, len(v.items)/2)
	for i := 0; i < len(v.items); i += 2 {
		k, val := &v.items[i], &v.items[i+1]
		if p := CheckEnvName(k.value); p != "" {
			return d.errorf(k.pos, "invalid variable name %q: %s", k.value, p)
		}
		if val.null {
			return d.errorf(val.pos, "env.set.%s has no value; write \"\" for an empty one", k.value)
		}
		str, err := d.scalar(val, "env.set."+k.value)
		if err != nil {
			return err
		}
		if strings.IndexByte(str, 0) >= 0 {
			return d.errorf(val.pos, "env.set.%s holds a NUL character", k.value)
		}
		e.Set[k.value] = str
		e.SetOrder = append(e.SetOrder, k.value)
		setPos(s, "env.set."+k.value, k.pos)
	}
	return nil
}

func (d *decoder) caches(v *node, w where) ([]Cache, error) {
	if err := d.want(v, seqNode, "caches", "a list of {name, path}"); err != nil {
		return nil, err
	}
	list := make([]Cache, 0, len(v.items))
	for i := range v.items {
		it := &v.items[i]
		if it.null || it.kind != mapNode {
			return nil, d.errorf(it.pos, "a cache is a mapping: {name: NAME, path: /PATH}")
		}
		c := Cache{Pos: it.pos}
		var name, path *node
		for j := 0; j < len(it.items); j += 2 {
			k, cv := &it.items[j], &it.items[j+1]
			var err error
			switch k.value {
			case "name":
				if c.Name, err = d.scalar(cv, "name"); err == nil {
					err = d.check(cv, "cache name", checkStoreName(c.Name))
				}
				name = cv
			case "path":
				if c.Path, err = d.scalar(cv, "path"); err == nil {
					err = d.check(cv, "cache path", checkInsidePath(c.Path))
				}
				path = cv
			default:
				return nil, d.unknown(k, w.in("a cache"), cacheKeys[:])
			}
			if err != nil {
				return nil, err
			}
		}
		if name == nil || path == nil {
			return nil, d.errorf(it.pos, "a cache needs a name and a path")
		}
		for _, o := range list {
			if o.Name == c.Name {
				return nil, d.errorf(name.pos, "duplicate cache name %q (first at line %d)", c.Name, o.Pos.Line)
			}
			if cleanPath(o.Path) == cleanPath(c.Path) {
				return nil, d.errorf(path.pos, "cache %q uses the path of cache %q (line %d)", c.Name, o.Name, o.Pos.Line)
			}
		}
		list = append(list, c)
	}
	return list, nil
}

func (d *decoder) secrets(v *node, w where) ([]Secret, error) {
	if err := d.want(v, seqNode, "secrets", "a list of {name, file, path, env}"); err != nil {
		return nil, err
	}
	list := make([]Secret, 0, len(v.items))
	for i := range v.items {
		it := &v.items[i]
		if it.null || it.kind != mapNode {
			return nil, d.errorf(it.pos, "a secret is a mapping: {name: NAME, file: HOST_FILE}")
		}
		s := Secret{Pos: it.pos}
		var name, file, path *node
		for j := 0; j < len(it.items); j += 2 {
			k, sv := &it.items[j], &it.items[j+1]
			var err error
			switch k.value {
			case "name":
				if s.Name, err = d.scalar(sv, "name"); err == nil {
					err = d.check(sv, "secret name", checkStoreName(s.Name))
				}
				name = sv
			case "file":
				if s.File, err = d.scalar(sv, "file"); err == nil {
					err = d.check(sv, "secret file", checkHostPath(s.File))
				}
				file = sv
			case "path":
				if s.Path, err = d.scalar(sv, "path"); err == nil {
					err = d.check(sv, "secret path", checkInsidePath(s.Path))
				}
				path = sv
			case "env":
				if s.Env, err = d.scalar(sv, "env"); err == nil {
					err = d.check(sv, "secret env", CheckEnvName(s.Env))
				}
			default:
				return nil, d.unknown(k, w.in("a secret"), secretKeys[:])
			}
			if err != nil {
				return nil, err
			}
		}
		if name == nil || file == nil {
			return nil, d.errorf(it.pos, "a secret needs a name and a file")
		}
		for _, o := range list {
			if o.Name == s.Name {
				return nil, d.errorf(name.pos, "duplicate secret name %q (first at line %d)", s.Name, o.Pos.Line)
			}
			if cleanPath(o.target()) == cleanPath(s.target()) {
				at := it.pos
				if path != nil {
					at = path.pos
				}
				return nil, d.errorf(at, "secret %q uses the path of secret %q (line %d)", s.Name, o.Name, o.Pos.Line)
			}
		}
		list = append(list, s)
	}
	return list, nil
}

// target is where a secret appears inside.
func (s *Secret) target() string {
	if s.Path != "" {
		return s.Path
	}
	return "/run/secrets/" + s.Name
}

func (d *decoder) limits(s *Settings, key, v *node, w where) (*Limits, error) {
	if err := d.want(v, mapNode, "limits", "a mapping (memory:, pids:, cpus:, timeout:, tmp_size:, disk:)"); err != nil {
		return nil, err
	}
	l := &Limits{Pos: key.pos}
	for i := 0; i < len(v.items); i += 2 {
		k, lv := &v.items[i], &v.items[i+1]
		var err error
		switch k.value {
		case "memory":
			l.Memory, err = d.size(lv, "limits.memory", 4<<20, "4m")
		case "tmp_size":
			l.TmpSize, err = d.size(lv, "limits.tmp_size", 1<<20, "1m")
		case "disk":
			if lv.kind == scalarNode && lv.value == "none" {
				l.Disk = &lv.value
			} else {
				l.Disk, err = d.size(lv, "limits.disk", 16<<20, "16m")
			}
		case "pids":
			var n int64
			if n, err = d.integer(lv, "limits.pids"); err == nil {
				if n < 2 {
					err = d.errorf(lv.pos, "limits.pids must be at least 2 (the sandbox's init and the command)")
				}
				l.Pids = &n
			}
		case "cpus":
			var c float64
			if c, err = d.number(lv, "limits.cpus"); err == nil {
				if c < 0.01 {
					err = d.errorf(lv.pos, "limits.cpus must be at least 0.01")
				}
				l.CPUs = &c
			}
		case "timeout":
			var t string
			if t, err = d.scalar(lv, "limits.timeout"); err == nil {
				if dur, perr := units.ParseDuration(t); checkDuration(t) != "" || perr != nil || dur <= 0 {
					err = d.errorf(lv.pos, "invalid limits.timeout %q: use a duration like 30s, 5m or 1h30m, or a number of seconds", t)
				}
				l.Timeout = &t
			}
		default:
			return nil, d.unknown(k, w.in("limits"), limitsKeys[:])
		}
		if err != nil {
			return nil, err
		}
		setPos(s, "limits."+k.value, k.pos)
	}
	return l, nil
}

// size decodes a size of at least min bytes.
func (d *decoder) size(v *node, key string, min int64, minText string) (*string, error) {
	s, err := d.scalar(v, key)
	if err != nil {
		return nil, err
	}
	if n, err := units.ParseSize(s); checkSize(s) != "" || err != nil || n < min {
		return nil, d.errorf(v.pos, "invalid %s %q: use a size of at least %s, like 512m or 2g", key, s, minText)
	}
	return &s, nil
}

// hooks decodes pre_run: one command as a string, or a list whose items
// are strings (run with /bin/sh -c) or lists of arguments.
func (d *decoder) hooks(v *node) ([]Hook, error) {
	if v.kind == scalarNode {
		s, err := d.scalar(v, "pre_run")
		if err != nil {
			return nil, err
		}
		if strings.TrimSpace(s) == "" {
			return nil, d.errorf(v.pos, "pre_run is an empty command")
		}
		return []Hook{{Pos: v.pos, Shell: s}}, nil
	}
	if err := d.want(v, seqNode, "pre_run", "a command, or a list of commands"); err != nil {
		return nil, err
	}
	list := make([]Hook, 0, len(v.items))
	for i := range v.items {
		it := &v.items[i]
		h := Hook{Pos: it.pos}
		switch it.kind {
		case seqNode:
			args, err := d.strings(it, "pre_run command", checkNotEmpty)
			if err != nil {
				return nil, err
			}
			if len(args) == 0 {
				return nil, d.errorf(it.pos, "pre_run has an empty command")
			}
			h.Args = args
		default:
			s, err := d.scalar(it, "pre_run item")
			if err != nil {
				return nil, err
			}
			if strings.TrimSpace(s) == "" {
				return nil, d.errorf(it.pos, "pre_run has an empty command")
			}
			h.Shell = s
		}
		list = append(list, h)
	}
	return list, nil
}

func (d *decoder) host(s *Settings, key, v *node, w where) (*HostPolicy, error) {
	if err := d.want(v, mapNode, "host", "a mapping (allow:, block_env:)"); err != nil {
		return nil, err
	}
	h := &HostPolicy{Pos: key.pos}
	for i := 0; i < len(v.items); i += 2 {
		k, hv := &v.items[i], &v.items[i+1]
		var err error
		switch k.value {
		case "allow":
			h.Allow, err = d.strings(hv, "host.allow", checkGlob)
		case "block_env":
			h.BlockEnv, err = d.strings(hv, "host.block_env", checkNameGlob)
		default:
			return nil, d.unknown(k, w.in("host"), hostKeys[:])
		}
		if err != nil {
			return nil, err
		}
		setPos(s, "host."+k.value, k.pos)
	}
	return h, nil
}

// anyString accepts every value.
func anyString(string) string { return "" }
