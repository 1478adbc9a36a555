package config

import (
	"strings"

	"github.com/pinfold/pinfold/internal/units"
)

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
