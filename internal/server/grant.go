package server

// What a tenant's create request is granted: each field checked against
// the operator's policy and the template (createFields), and the
// resolved plan checked again (checkPlan).

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/plan"
)

// grant is what one tenant request may have: the policy's grants and
// those of the template it names.
type grant struct {
	pol *Policy
	t   *Template
}

func (g grant) list(pol []string, tmpl func(*Template) []string) []string {
	if g.t == nil {
		return pol
	}
	return slices.Concat(pol, tmpl(g.t))
}

func (g grant) backends() []string {
	l := g.list(g.pol.Backends, func(t *Template) []string { return one(t.Backend) })
	if slices.Contains(l, "auto") {
		l = append(l, "native", "podman", "docker") // what auto picks among
	}
	return l
}

func (g grant) networks() []string {
	return g.list(g.pol.Networks, func(t *Template) []string { return one(t.Network) })
}

func (g grant) bases() []string {
	return g.list(g.pol.Bases, func(t *Template) []string { return one(t.Base) })
}

func (g grant) allow() []string {
	return g.list(g.pol.Allow, func(t *Template) []string { return t.Allow })
}

func (g grant) dns() []string { return g.list(g.pol.DNS, func(t *Template) []string { return t.DNS }) }

func (g grant) env() []string {
	var names []string
	for _, e := range g.list(g.pol.Env, func(t *Template) []string { return t.Env }) {
		if !strings.Contains(e, "=") {
			names = append(names, e)
		}
	}
	return names
}

func one(v string) []string {
	if v == "" {
		return nil
	}
	return []string{v}
}

// fieldRule decides one field of a tenant's create request when it is
// set: nil lets it through, an error refuses the request.
type fieldRule func(g grant, field string, v reflect.Value) error

// createFields holds a decision for every field of CreateRequest, by its
// JSON name; a field without one is refused (TestCreateRequestGrants
// fails until it has one).
var createFields = map[string]fieldRule{
	"name":         free,
	"idle_timeout": bounded("idle_timeout"),
	"workspace":    never,
	"workdir":      free, // a path inside the sandbox
	"base":         oneOf("bases", grant.bases),
	"access":       free, // how the tenant's own workspace is written
	"backend":      oneOf("backends", grant.backends),
	"network":      oneOf("networks", grant.networks),
	"allow":        eachOf("allow", grant.allow),
	"deny":         free, // only narrows what the sandbox reaches
	"dns":          eachOf("dns", grant.dns),
	"env":          envRule,
	"mounts":       never,
	"user":         free, // root inside maps to an unprivileged host id
	"hostname":     free,
	"memory":       bounded("memory"),
	"pids":         bounded("pids"),
	"cpus":         bounded("cpus"),
	"timeout":      bounded("timeout"),
	"tmp_size":     bounded("tmp_size"),
	"snapshot":     free, // the tenant's own; another's answers 404
	"template":     templateRule,
}

func free(grant, string, reflect.Value) error { return nil }

func never(_ grant, field string, v reflect.Value) error {
	return fault.New(fault.NotGranted, fmt.Sprintf("a tenant cannot name host paths: %s %s", field, text(v)),
		"a tenant is a stranger to this host: no policy grants it the host's files",
		"leave "+field+" out: a tenant's sandbox gets a fresh workspace of its own; the operator offers bases and templates in the policy file", nil)
}

func notGranted(field, value, key string) error {
	return fault.New(fault.NotGranted, fmt.Sprintf("the server's policy does not grant %s %s to tenants", field, value),
		"a tenant chooses only among what the operator grants",
		fmt.Sprintf("the operator grants it with %q in the policy file (pinfold serve --policy FILE, docs/api.md#the-operators-policy)", key), nil)
}

func oneOf(key string, list func(grant) []string) fieldRule {
	return func(g grant, field string, v reflect.Value) error {
		if !slices.Contains(list(g), v.String()) {
			return notGranted(field, strconv.Quote(v.String()), key)
		}
		return nil
	}
}

func eachOf(key string, list func(grant) []string) fieldRule {
	return func(g grant, field string, v reflect.Value) error {
		l := list(g)
		for _, e := range v.Interface().([]string) {
			if !slices.Contains(l, e) {
				return notGranted(field, strconv.Quote(e), key)
			}
		}
		return nil
	}
}

// envRule lets NAME=VALUE through (the tenant's own value) and refuses
// NAME, which copies the server's variable, unless granted.
func envRule(g grant, field string, v reflect.Value) error {
	names := g.env()
	for _, e := range v.Interface().([]string) {
		if !strings.Contains(e, "=") && !slices.Contains(names, e) {
			return notGranted(field, strconv.Quote(e)+" (the server's own variable)", "env")
		}
	}
	return nil
}

func templateRule(g grant, field string, v reflect.Value) error {
	if g.t == nil {
		return notGranted(field, strconv.Quote(v.String()), "templates")
	}
	return nil
}

func bounded(key string) fieldRule {
	return func(g grant, field string, v reflect.Value) error {
		var l Limits
		switch key {
		case "memory":
			l.Memory = limit(v.String())
		case "pids":
			l.Pids = limit(v.String())
		case "cpus":
			l.CPUs = limit(v.String())
		case "tmp_size":
			l.TmpSize = limit(v.String())
		case "timeout":
			l.Timeout = limit(v.String())
		case "idle_timeout":
			l.IdleTimeout = limit(v.String())
		}
		// No limit ("unlimited", or 0 for some) is past any.
		if v.String() == "unlimited" || isZero(v.String()) {
			return notGranted(field, strconv.Quote(v.String())+" (no limit)", "limits."+key)
		}
		if _, err := l.bounds(&g.pol.max); err != nil {
			if strings.Contains(err.Error(), "over the policy's limit") {
				return notGranted(field, strconv.Quote(v.String())+" (over the policy's limit)", "limits."+key)
			}
			return fault.New(fault.BadValue, "invalid "+field+" "+strconv.Quote(v.String()), err.Error(), "give a positive value, like 512m, 100, 0.5 or 30m", err)
		}
		return nil
	}
}

func text(v reflect.Value) string {
	if v.Kind() == reflect.Slice {
		return strconv.Quote(strings.Join(v.Interface().([]string), " "))
	}
	return strconv.Quote(v.String())
}

// jsonName is a field's name in the request's JSON.
func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "" {
		name = f.Name
	}
	return name
}

// grantRequest checks a tenant's create request against the policy, field
// by field, and returns it with what the tenant left out filled in from
// the template it names and the policy's defaults.
func (p *Policy) grantRequest(c CreateRequest) (CreateRequest, grant, error) {
	g := grant{pol: p}
	if c.Template != "" {
		g.t = p.Templates[c.Template]
	}
	v := reflect.ValueOf(c)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		name := jsonName(f)
		rule, ok := createFields[name]
		if !ok {
			// Fail closed: a field nobody decided on is not granted.
			return c, g, fault.New(fault.NotGranted, "the request's field "+name+" is not granted to tenants", "the server has no grant decision for it", "leave it out", nil)
		}
		if fv := v.Field(i); !fv.IsZero() {
			if err := rule(g, name, fv); err != nil {
				return c, g, err
			}
		}
	}
	t := g.t
	if t == nil {
		t = &Template{}
	}
	pick := func(v *string, tv string, def string) {
		if *v == "" {
			*v = tv
		}
		if *v == "" {
			*v = def
		}
	}
	pick(&c.Backend, t.Backend, p.Backends[0])
	pick(&c.Network, t.Network, p.Networks[0])
	pick(&c.Base, t.Base, p.Bases[0])
	pick(&c.Access, t.Access, "")
	if c.Allow == nil {
		c.Allow = t.Allow
	}
	if c.Deny == nil {
		c.Deny = t.Deny
	}
	if c.DNS == nil {
		c.DNS = t.DNS
	}
	c.Env = slices.Concat(t.Env, c.Env)
	lim := func(v *string, tv, pv limit) {
		if *v == "" {
			*v = string(tv)
		}
		if *v == "" {
			*v = string(pv)
		}
		if *v == "unlimited" {
			*v = ""
		}
	}
	lim(&c.Memory, t.Limits.Memory, p.Limits.Memory)
	lim(&c.Pids, t.Limits.Pids, p.Limits.Pids)
	lim(&c.CPUs, t.Limits.CPUs, p.Limits.CPUs)
	lim(&c.TmpSize, t.Limits.TmpSize, p.Limits.TmpSize)
	lim(&c.Timeout, t.Limits.Timeout, p.Limits.Timeout)
	lim(&c.IdleTimeout, t.Limits.IdleTimeout, p.Limits.IdleTimeout)
	return c, g, nil
}

// checkPlan checks the resolved plan of a tenant's session against the
// grant, whatever made it: nothing of the host that was not granted
// (mounts, captures, hooks, secrets, caches, capabilities, host
// variables, loopback, published ports), a granted backend, network,
// allow list and resolvers, and limits within the policy's.
func (g grant) checkPlan(p *plan.Plan) error {
	refuse := func(what string) error {
		return fault.New(fault.NotGranted, "the tenant's sandbox would have "+what, "a tenant's plan holds nothing of the host the operator did not grant",
			"grant it in the policy file (docs/api.md#the-operators-policy), or leave it out of the request", nil)
	}
	s := &p.Sandbox
	switch {
	case p.Mode != "sandbox":
		return refuse("no sandbox (backend host)")
	case !slices.Contains(g.backends(), p.Backend):
		return refuse("the backend " + p.Backend)
	case !slices.Contains(g.networks(), string(s.Network)):
		return refuse("the network " + string(s.Network))
	case len(s.Mounts) > 0 || len(s.Captures) > 0 || len(p.Captures) > 0:
		return refuse("host directories mounted")
	case len(p.Hooks) > 0:
		return refuse("pre_run hooks, which run on the host")
	case len(p.Secrets) > 0 || len(p.Caches) > 0:
		return refuse("secrets or caches of the host")
	case len(s.Capabilities) > 0:
		return refuse("added capabilities")
	case s.Net.HostLoopback || len(s.Net.Publish) > 0:
		return refuse("the host's loopback or published ports")
	}
	for _, a := range s.Net.Allow {
		if !slices.Contains(g.allow(), a) {
			return refuse("the allow entry " + a)
		}
	}
	for _, d := range s.Net.DNS {
		if !slices.Contains(g.dns(), d) {
			return refuse("the resolver " + d)
		}
	}
	for _, e := range p.Command.Env {
		if strings.HasPrefix(e.From, plan.FromHost) && !slices.Contains(g.env(), e.Name) {
			return refuse("the server's variable " + e.Name)
		}
	}
	m, l := g.pol.max, s.Limits
	if m.memory > 0 && (l.Memory <= 0 || l.Memory > m.memory) || m.pids > 0 && (l.Pids <= 0 || l.Pids > m.pids) ||
		m.cpus > 0 && (l.CPUs <= 0 || l.CPUs > m.cpus) || m.tmpSize > 0 && (l.TmpSize <= 0 || l.TmpSize > m.tmpSize) ||
		m.timeout > 0 && (p.Timeout <= 0 || p.Timeout > m.timeout) {
		return refuse("limits beyond the policy's")
	}
	return nil
}

// hostPort checks the host port a tenant publishes on: 0 (one picked
// for it) or one of the policy's host_ports.
func (p *Policy) hostPort(port int) error {
	if port == 0 || p.HostPorts != nil && port >= p.HostPorts.From && port <= p.HostPorts.To {
		return nil
	}
	return notGranted("host_port", strconv.Itoa(port), "host_ports")
}
