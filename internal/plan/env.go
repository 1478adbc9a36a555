package plan

import (
	"strings"

	"github.com/pinfold/pinfold/internal/config"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/sandbox"
)

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
