package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pinfold/pinfold/internal/config"
	"github.com/pinfold/pinfold/internal/store"
	"github.com/pinfold/pinfold/internal/units"
)

// Policy is what the server's operator grants its tenants (pinfold serve
// --policy FILE, a JSON file the operator owns). A tenant is a stranger:
// its create request picks only among what is granted here, and a field
// that names a host resource (a path, a variable, an address, a port, a
// runtime) is refused unless granted. Lists are exact values; the first
// of backends, networks and bases is what a request that sets none gets.
// The owner (the unix socket) is not bound by it.
type Policy struct {
	Backends []string `json:"backends,omitempty"` // default ["native"]
	Networks []string `json:"networks,omitempty"` // default ["none"]
	Bases    []string `json:"bases,omitempty"`    // default ["host"]
	// Allow are the allow-list entries a tenant may list; DNS the
	// resolvers it may name; Env the host variables it may copy by name.
	Allow []string `json:"allow,omitempty"`
	DNS   []string `json:"dns,omitempty"`
	Env   []string `json:"env,omitempty"`
	// HostPorts are the host ports (on 127.0.0.1) a tenant may publish
	// on; without, a published port gets one the kernel picks.
	HostPorts *PortRange `json:"host_ports,omitempty"`
	// Limits are the most a tenant may ask, and what it gets when it
	// asks nothing (DefaultLimits for what is not set).
	Limits    Limits               `json:"limits"`
	Templates map[string]*Template `json:"templates,omitempty"`
	// ApplyPolicy lets a tenant apply, with policy=true, a changeset that
	// adds or changes a pinfold.yaml in its workspace (PF186 otherwise).
	ApplyPolicy bool `json:"apply_policy,omitempty"`

	max bounds
}

// PortRange is a range of host ports, both ends included.
type PortRange struct {
	From int `json:"from"`
	To   int `json:"to"`
}

// Limits are sizes ("2g"), counts and durations ("1h"), as the create
// request writes them; "unlimited" sets no bound (and no default).
type Limits struct {
	Memory      limit `json:"memory,omitempty"`
	Pids        limit `json:"pids,omitempty"`
	CPUs        limit `json:"cpus,omitempty"`
	TmpSize     limit `json:"tmp_size,omitempty"`
	Timeout     limit `json:"timeout,omitempty"`
	IdleTimeout limit `json:"idle_timeout,omitempty"`
}

// limit is a limit's text; JSON numbers are read as their text.
type limit string

func (l *limit) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] != '"' {
		var n json.Number
		if err := json.Unmarshal(b, &n); err != nil {
			return err
		}
		*l = limit(n)
		return nil
	}
	return json.Unmarshal(b, (*string)(l))
}

// DefaultLimits bound a tenant's sandbox when the policy says nothing.
var DefaultLimits = Limits{Memory: "2g", Pids: "1024", CPUs: "2", TmpSize: "1g", Timeout: "24h", IdleTimeout: "1h"}

// Template is a named choice the operator offers ("template": NAME in
// the create request): its values are what the sandbox gets where the
// request sets nothing, and they are granted to the requests that name
// it. Its env entries are set always (NAME=VALUE, or NAME: the server's
// variable).
type Template struct {
	Base    string   `json:"base,omitempty"`
	Backend string   `json:"backend,omitempty"`
	Network string   `json:"network,omitempty"`
	Access  string   `json:"access,omitempty"`
	Allow   []string `json:"allow,omitempty"`
	Deny    []string `json:"deny,omitempty"`
	DNS     []string `json:"dns,omitempty"`
	Env     []string `json:"env,omitempty"`
	Limits  Limits   `json:"limits"`
}

// bounds are Limits read; zero is no bound.
type bounds struct {
	memory, tmpSize, pids int64
	cpus                  float64
	timeout, idle         time.Duration
}

// DefaultPolicy is what tenants get without a policy file: the native
// runtime, no network, the host base, nothing of the host's environment,
// DNS or ports, and DefaultLimits.
func DefaultPolicy() *Policy {
	p := &Policy{}
	if err := p.check(); err != nil {
		panic(err) // the defaults are sound
	}
	return p
}

// ReadPolicy reads the operator's policy file. It is configuration that
// runs sandboxes as the server's user, so it is read only when that user
// or root owns it and nobody else may write it (fail closed), and
// anything in it that does not parse or is not known is refused.
func ReadPolicy(path string) (*Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a regular file", path)
	case !ok || st.Uid != 0 && int(st.Uid) != os.Getuid():
		return nil, fmt.Errorf("%s is not owned by root or by this server's user: chown it", path)
	case fi.Mode().Perm()&0o022 != 0:
		return nil, fmt.Errorf("%s is writable by others (mode %v): chmod go-w it", path, fi.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, 1<<20+1))
	if err != nil {
		return nil, err
	}
	if len(b) > 1<<20 {
		return nil, fmt.Errorf("%s is over 1 MiB", path)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	p := &Policy{}
	if err := dec.Decode(p); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: more than one JSON value", path)
	}
	if err := p.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// check validates a policy read and sets its defaults.
func (p *Policy) check() error {
	def := func(l *[]string, key string, v ...string) error {
		if *l == nil {
			*l = v
		} else if len(*l) == 0 {
			return fmt.Errorf("%s is empty: grant at least one, or leave it out for %q", key, v)
		}
		return nil
	}
	if err := errors.Join(def(&p.Backends, "backends", "native"), def(&p.Networks, "networks", "none"), def(&p.Bases, "bases", "host")); err != nil {
		return err
	}
	if err := checkChoices("", p.Backends, p.Networks, p.Bases, p.Allow, p.DNS, p.Env); err != nil {
		return err
	}
	if p.HostPorts != nil && (p.HostPorts.From < 1 || p.HostPorts.To > 65535 || p.HostPorts.From > p.HostPorts.To) {
		return fmt.Errorf("host_ports: want 1 <= from <= to <= 65535")
	}
	for _, kv := range []struct {
		v   *limit
		def limit
	}{{&p.Limits.Memory, DefaultLimits.Memory}, {&p.Limits.Pids, DefaultLimits.Pids}, {&p.Limits.CPUs, DefaultLimits.CPUs},
		{&p.Limits.TmpSize, DefaultLimits.TmpSize}, {&p.Limits.Timeout, DefaultLimits.Timeout}, {&p.Limits.IdleTimeout, DefaultLimits.IdleTimeout}} {
		if *kv.v == "" {
			*kv.v = kv.def
		}
	}
	var err error
	if p.max, err = p.Limits.bounds(nil); err != nil {
		return fmt.Errorf("limits: %w", err)
	}
	for name, t := range p.Templates {
		if !validName(name) || t == nil {
			return fmt.Errorf("templates: %q: a template is named by letters, digits, '-' and '_'", name)
		}
		one := func(v string) []string {
			if v == "" {
				return nil
			}
			return []string{v}
		}
		if err := checkChoices("templates."+name+".", one(t.Backend), one(t.Network), one(t.Base), t.Allow, t.DNS, t.Env); err != nil {
			return err
		}
		if _, err := t.Limits.bounds(&p.max); err != nil {
			return fmt.Errorf("templates.%s.limits: %w", name, err)
		}
	}
	return nil
}

func checkChoices(prefix string, backends, networks, bases, allow, dns, env []string) error {
	for _, b := range backends {
		if !slices.Contains([]string{"native", "podman", "docker", "kubernetes", "auto"}, b) {
			return fmt.Errorf("%sbackend %q: want native, podman, docker, kubernetes or auto (a tenant's sandbox is never the host)", prefix, b)
		}
	}
	for _, n := range networks {
		if !slices.Contains([]string{"none", "outbound", "allow", "host"}, n) {
			return fmt.Errorf("%snetwork %q: want none, outbound, allow or host", prefix, n)
		}
	}
	for _, b := range bases {
		// A relative path would be the tenant's workspace's.
		kind, path, _ := strings.Cut(b, ":")
		ok := b == "host" || b == "debian-12" ||
			(kind == "dir" || kind == "tar" || kind == "oci") && filepath.IsAbs(path) ||
			kind == "oci" && store.IsReference(path)
		if !ok {
			return fmt.Errorf("%sbase %q: want host, debian-12, dir:/PATH, tar:/PATH, oci:/PATH[:REF] or oci:HOST/REPO (paths absolute)", prefix, b)
		}
	}
	for _, a := range slices.Concat(allow, dns) {
		if strings.TrimSpace(a) == "" {
			return fmt.Errorf("%sallow and dns entries cannot be empty", prefix)
		}
	}
	for _, e := range env {
		name, _, _ := strings.Cut(e, "=")
		if config.CheckEnvName(name) != "" {
			return fmt.Errorf("%senv %q: want NAME or NAME=VALUE", prefix, e)
		}
	}
	return nil
}

// bounds reads limits; within, when given, they must stay.
func (l Limits) bounds(within *bounds) (bounds, error) {
	var b bounds
	var err error
	set := func(key string, v limit, parse func(string) error) {
		if err == nil && v != "" && v != "unlimited" {
			if perr := parse(string(v)); perr != nil {
				err = fmt.Errorf("%s %q: %w", key, v, perr)
			}
		}
	}
	set("memory", l.Memory, func(s string) (e error) { b.memory, e = positiveSize(s); return })
	set("tmp_size", l.TmpSize, func(s string) (e error) { b.tmpSize, e = positiveSize(s); return })
	set("pids", l.Pids, func(s string) (e error) { b.pids, e = positiveInt(s); return })
	set("cpus", l.CPUs, func(s string) (e error) { b.cpus, e = positiveFloat(s); return })
	set("timeout", l.Timeout, func(s string) (e error) { b.timeout, e = positiveDuration(s); return })
	set("idle_timeout", l.IdleTimeout, func(s string) (e error) { b.idle, e = positiveDuration(s); return })
	if err != nil || within == nil {
		return b, err
	}
	over := func(key string, v, max float64) {
		if err == nil && max > 0 && v > max {
			err = fmt.Errorf("%s is over the policy's limit", key)
		}
	}
	over("memory", float64(b.memory), float64(within.memory))
	over("tmp_size", float64(b.tmpSize), float64(within.tmpSize))
	over("pids", float64(b.pids), float64(within.pids))
	over("cpus", b.cpus, within.cpus)
	over("timeout", float64(b.timeout), float64(within.timeout))
	over("idle_timeout", float64(b.idle), float64(within.idle))
	return b, err
}

func isZero(s string) bool {
	if n, err := units.ParseSize(s); err == nil && n == 0 {
		return true
	}
	d, err := units.ParseDuration(s)
	return err == nil && d == 0
}

func positiveSize(s string) (int64, error) {
	n, err := units.ParseSize(s)
	if err == nil && n <= 0 {
		err = errors.New("not positive")
	}
	return n, err
}

func positiveInt(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err == nil && n <= 0 {
		err = errors.New("not positive")
	}
	return n, err
}

func positiveFloat(s string) (float64, error) {
	n, err := strconv.ParseFloat(s, 64)
	if err == nil && !(n > 0 && n < math.Inf(1)) {
		err = errors.New("not positive")
	}
	return n, err
}

func positiveDuration(s string) (time.Duration, error) {
	d, err := units.ParseDuration(s)
	if err == nil && d <= 0 {
		err = errors.New("not positive")
	}
	return d, err
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
