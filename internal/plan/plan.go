// Package plan resolves what a user asked for (flags, defaults, the
// environment) into a Plan: the single description of an execution that a
// backend runs. Resolving is pure: no file system or process access beyond
// what the caller hands in, so every decision is testable.
package plan

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/sandbox"
)

// Plan is a fully resolved execution.
type Plan struct {
	Mode    string // "sandbox"
	Backend string // "native"
	Sandbox sandbox.Spec
	Command Command
	TTY     bool
	// Interactive keeps the command's stdin attached.
	Interactive bool
	Timeout     time.Duration
	// Sources says where each setting came from, by setting name.
	Sources map[string]string
}

// Command is what runs in the sandbox.
type Command struct {
	Args []string
	Env  []EnvVar
	Dir  string
}

// EnvVar is one environment variable and where it came from.
type EnvVar struct {
	Name, Value, From string
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
	Base, Access, Workspace, Workdir, User, Hostname, Network string
	Memory, Pids, CPUs, Timeout, TmpSize                      string
	Mounts, Env, CapAdd                                       []string
	TTY, Interactive                                          bool
}

// Request is everything Resolve looks at.
type Request struct {
	Args  []string
	Flags Flags
	// Cwd is the current directory with symlinks resolved.
	Cwd string
	// Getenv looks up the host environment (for --env NAME).
	Getenv func(string) (string, bool)
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
	f := &r.Flags
	if len(r.Args) == 0 {
		return nil, usage("no command given", "pinfold run [flags] -- COMMAND [ARGS...]")
	}
	p := &Plan{Mode: "sandbox", Backend: "native", TTY: f.TTY, Interactive: f.Interactive,
		Sources: map[string]string{}}
	sp := &p.Sandbox
	set := func(name string, given bool) {
		if given {
			p.Sources[name] = FromFlag
		} else {
			p.Sources[name] = FromDefault
		}
	}

	var err error
	if sp.Base, err = parseBase(f.Base); err != nil {
		return nil, err
	}
	set("base", f.Base != "")

	sp.Workspace = f.Workspace
	p.Sources["workspace"] = FromFlag
	if sp.Workspace == "" {
		sp.Workspace, p.Sources["workspace"] = r.Cwd, FromCwd
	} else if !filepath.IsAbs(sp.Workspace) {
		sp.Workspace = filepath.Join(r.Cwd, sp.Workspace)
	}
	sp.Workspace = filepath.Clean(sp.Workspace)

	switch a := sandbox.Access(f.Access); a {
	case "":
		sp.Access = sandbox.AccessReadWrite
	case sandbox.AccessReadWrite, sandbox.AccessReadOnly, sandbox.AccessNone:
		sp.Access = a
	default:
		return nil, badValue("--access", f.Access, "rw, ro or none")
	}
	set("access", f.Access != "")

	for _, m := range f.Mounts {
		mt, err := parseMount(m, r.Cwd)
		if err != nil {
			return nil, err
		}
		sp.Mounts = append(sp.Mounts, mt)
	}

	switch f.User {
	case "":
	case "root", "0", "0:0":
		sp.Root = true
	default:
		return nil, badValue("--user", f.User, "root (the invoking user's ids are the default)")
	}
	set("user", f.User != "")

	sp.Hostname = f.Hostname
	if sp.Hostname == "" {
		sp.Hostname = sandbox.DefaultHostname
	} else if !validHostname(sp.Hostname) {
		return nil, badValue("--hostname", f.Hostname, "letters, digits, '-' and '.', at most 64 characters")
	}
	set("hostname", f.Hostname != "")

	switch n := sandbox.Network(f.Network); n {
	case "":
		sp.Network = sandbox.NetworkNone
	case sandbox.NetworkNone, sandbox.NetworkHost:
		sp.Network = n
	default:
		return nil, badValue("--network", f.Network, "none or host")
	}
	set("network", f.Network != "")
	sp.Capabilities = f.CapAdd

	if f.Memory != "" {
		if sp.Limits.Memory, err = ParseSize(f.Memory); err != nil || sp.Limits.Memory < 4<<20 {
			return nil, badValue("--memory", f.Memory, "a size of at least 4m, like 512m or 2g")
		}
	}
	if f.Pids != "" {
		if sp.Limits.Pids, err = strconv.ParseInt(f.Pids, 10, 64); err != nil || sp.Limits.Pids < 1 {
			return nil, badValue("--pids", f.Pids, "a positive number of processes")
		}
	}
	if f.CPUs != "" {
		if sp.Limits.CPUs, err = strconv.ParseFloat(f.CPUs, 64); err != nil || sp.Limits.CPUs <= 0 {
			return nil, badValue("--cpus", f.CPUs, "a positive number of CPUs, like 0.5 or 2")
		}
	}
	if f.TmpSize != "" {
		if sp.Limits.TmpSize, err = ParseSize(f.TmpSize); err != nil || sp.Limits.TmpSize < 1<<20 {
			return nil, badValue("--tmp-size", f.TmpSize, "a size of at least 1m, like 256m")
		}
	} else {
		sp.Limits.TmpSize = sandbox.DefaultTmpSize
	}
	if f.Timeout != "" {
		if p.Timeout, err = ParseDuration(f.Timeout); err != nil || p.Timeout <= 0 {
			return nil, badValue("--timeout", f.Timeout, "a duration like 30s, 5m or 1h30m (or seconds)")
		}
	}

	p.Command.Args = r.Args
	p.Command.Dir = f.Workdir
	if p.Command.Dir == "" {
		p.Command.Dir = sp.Workspace
		if sp.Access == sandbox.AccessNone {
			p.Command.Dir = "/"
		} else if r.Cwd != "" && strings.HasPrefix(r.Cwd+"/", sp.Workspace+"/") {
			p.Command.Dir = r.Cwd // cwd follows when it lies in the workspace
		}
	} else if !filepath.IsAbs(p.Command.Dir) {
		return nil, badValue("--workdir", f.Workdir, "an absolute path inside the sandbox")
	}
	if p.Command.Env, err = resolveEnv(r, sp); err != nil {
		return nil, err
	}
	return p, nil
}

// resolveEnv builds the command's environment: defaults, then --env in
// order (a later value wins). Nothing else of the host leaks in.
func resolveEnv(r *Request, sp *sandbox.Spec) ([]EnvVar, error) {
	vars := map[string]EnvVar{}
	var order []string
	put := func(v EnvVar) {
		if _, ok := vars[v.Name]; !ok {
			order = append(order, v.Name)
		}
		vars[v.Name] = v
	}
	for _, kv := range sandbox.DefaultEnv(sp, r.Flags.TTY) {
		name, value, _ := strings.Cut(kv, "=")
		if name == "TERM" && r.Term != "" {
			value = r.Term
		}
		put(EnvVar{Name: name, Value: value, From: FromDefault})
	}
	for _, e := range r.Flags.Env {
		name, value, hasValue := strings.Cut(e, "=")
		if name == "" || strings.ContainsAny(name, "\x00") {
			return nil, badValue("--env", e, "NAME=VALUE, or NAME to pass the host's value")
		}
		if hasValue {
			put(EnvVar{Name: name, Value: value, From: FromFlag})
			continue
		}
		if r.Getenv == nil {
			continue
		}
		if v, ok := r.Getenv(name); ok {
			put(EnvVar{Name: name, Value: v, From: FromHost})
		}
	}
	env := make([]EnvVar, 0, len(order))
	for _, n := range order {
		env = append(env, vars[n])
	}
	return env, nil
}

func parseBase(s string) (sandbox.Base, error) {
	kind, path, _ := strings.Cut(s, ":")
	switch {
	case s == "" || s == "host":
		return sandbox.Base{Kind: sandbox.BaseHost}, nil
	case (kind == "dir" || kind == "tar") && path != "":
		return sandbox.Base{Kind: sandbox.BaseKind(kind), Path: path}, nil
	}
	return sandbox.Base{}, badValue("--base", s, "host, dir:PATH or tar:PATH")
}

// parseMount reads SRC:DST[:ro|rw]; a relative SRC is relative to cwd.
func parseMount(s, cwd string) (sandbox.Mount, error) {
	parts := strings.Split(s, ":")
	var m sandbox.Mount
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
	if !filepath.IsAbs(m.Source) {
		m.Source = filepath.Join(cwd, m.Source)
	}
	m.Target = filepath.Clean(m.Target)
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

// ParseSize reads a size like 512, 64k, 256m, 2g, 1.5G or 512MiB (binary
// units, as in podman and docker).
func ParseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "b"), "i")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			mult = 1 << 10
		case 'm':
			mult = 1 << 20
		case 'g':
			mult = 1 << 30
		case 't':
			mult = 1 << 40
		}
		if mult > 1 {
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || v*float64(mult) > 1<<62 {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	return int64(v * float64(mult)), nil
}

// FormatSize prints a byte count the way ParseSize reads it.
func FormatSize(n int64) string {
	for _, u := range []struct {
		s string
		v int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.v && n%u.v == 0 {
			return strconv.FormatInt(n/u.v, 10) + u.s
		}
	}
	if n >= 1<<20 {
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + "MiB"
	}
	return strconv.FormatInt(n, 10) + "B"
}

// ParseDuration reads a Go duration ("1m30s") or a number of seconds.
func ParseDuration(s string) (time.Duration, error) {
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		return time.Duration(n * float64(time.Second)), nil
	}
	return time.ParseDuration(s)
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

func badValue(flag, value, want string) error {
	e := fault.New(fault.BadValue, fmt.Sprintf("invalid %s value %q", flag, value), "", "use "+want, nil)
	e.Exit = fault.ExitUsage
	return e
}
