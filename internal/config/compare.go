package config

import (
	"slices"
	"strconv"
	"strings"
)

// PolicyDiff is what a new version of a pinfold.yaml changes in the
// policy the host obeys, for a reviewer: a sandbox that writes one has its
// hooks run on the host by the next run.
type PolicyDiff struct {
	// Keys are the settings added, removed or changed: top-level keys
	// ("pre_run", "backend", "dispatch"), a profile's keys
	// ("profiles.build.mounts"), or a whole profile ("profiles.build").
	Keys []string `json:"keys,omitempty"`
	// Hooks are the pre_run hooks of the new version that the old one did
	// not have at the same place, as "pre_run: CMD" or
	// "profiles.NAME.pre_run: CMD".
	Hooks []string `json:"hooks,omitempty"`
	// Problem says what could not be told: a version that does not parse
	// (its hooks are unknown), a symbolic link, one that cannot be read.
	Problem string `json:"problem,omitempty"`
}

// ComparePolicy compares two versions of a config file; nil is a missing
// version. It reads only what it is given.
func ComparePolicy(path string, old, new []byte) PolicyDiff {
	var d PolicyDiff
	on, nn := topMap(path, old), topMap(path, new)
	if new != nil {
		if _, err := parseYAML(path, string(new)); err != nil {
			d.Problem = "the new version does not parse (" + firstLine(err.Error()) + "), so its hooks are unknown"
		}
	}
	if d.Problem != "" {
		return d // nothing of it can be compared
	}
	d.Keys = changedKeys(on, nn, "")
	if new != nil {
		nf, err := Parse(path, new)
		if err != nil {
			d.Problem = "the new version is not a valid config (" + firstLine(err.Error()) + ")"
			return d
		}
		oldHooks := map[string][]string{}
		if old != nil {
			if of, err := Parse(path, old); err == nil {
				oldHooks = hooksOf(of)
			}
		}
		for _, scope := range hookScopes(nf) {
			for _, h := range hooksOf(nf)[scope] {
				if !slices.Contains(oldHooks[scope], h) {
					d.Hooks = append(d.Hooks, scope+": "+h)
				}
			}
		}
	}
	return d
}

// topMap is the top-level mapping of a version, nil when there is none
// or it does not parse.
func topMap(path string, src []byte) *node {
	if src == nil {
		return nil
	}
	n, err := parseYAML(path, string(src))
	if err != nil || n.kind != mapNode {
		return nil
	}
	return &n
}

// changedKeys lists the keys of two mappings whose values differ,
// descending into profiles.
func changedKeys(a, b *node, prefix string) []string {
	var keys []string
	for _, k := range unionKeys(a, b) {
		av, bv := mapGet(a, k), mapGet(b, k)
		switch {
		case av != nil && bv != nil && sameNode(av, bv):
		case prefix == "" && k == "profiles" && av != nil && bv != nil && av.kind == mapNode && bv.kind == mapNode:
			for _, name := range unionKeys(av, bv) {
				ap, bp := mapGet(av, name), mapGet(bv, name)
				switch {
				case ap != nil && bp != nil && sameNode(ap, bp):
				case ap != nil && bp != nil && ap.kind == mapNode && bp.kind == mapNode:
					keys = append(keys, changedKeys(ap, bp, "profiles."+name+".")...)
				default:
					keys = append(keys, "profiles."+name)
				}
			}
		default:
			keys = append(keys, prefix+k)
		}
	}
	return keys
}

// unionKeys are the keys of b, then those only a has, in file order.
func unionKeys(a, b *node) []string {
	var keys []string
	for _, m := range []*node{b, a} {
		if m == nil || m.kind != mapNode {
			continue
		}
		for i := 0; i+1 < len(m.items); i += 2 {
			if k := m.items[i].value; !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	return keys
}

func mapGet(m *node, key string) *node {
	if m == nil || m.kind != mapNode {
		return nil
	}
	for i := 0; i+1 < len(m.items); i += 2 {
		if m.items[i].value == key {
			return &m.items[i+1]
		}
	}
	return nil
}

// sameNode compares two nodes as values: positions and the way a scalar
// is quoted do not matter, except where a plain one would be read as
// another type (true and "true", 1 and "1").
func sameNode(a, b *node) bool {
	if a.kind != b.kind || a.null != b.null || a.value != b.value || len(a.items) != len(b.items) {
		return false
	}
	if (a.style == plainStyle) != (b.style == plainStyle) && typedPlain(a.value) {
		return false
	}
	for i := range a.items {
		if !sameNode(&a.items[i], &b.items[i]) {
			return false
		}
	}
	return true
}

// hookScopes are the places a file sets pre_run, in file order.
func hookScopes(f *File) []string {
	var s []string
	if len(f.Settings.PreRun) > 0 {
		s = append(s, "pre_run")
	}
	for _, p := range f.Profiles {
		if len(p.Settings.PreRun) > 0 {
			s = append(s, "profiles."+p.Name+".pre_run")
		}
	}
	return s
}

// hooksOf are a file's hooks by place, as written.
func hooksOf(f *File) map[string][]string {
	m := map[string][]string{}
	add := func(scope string, hs []Hook) {
		for _, h := range hs {
			m[scope] = append(m[scope], HookText(h))
		}
	}
	add("pre_run", f.Settings.PreRun)
	for _, p := range f.Profiles {
		add("profiles."+p.Name+".pre_run", p.Settings.PreRun)
	}
	return m
}

// HookText is a hook as a person reads it: the shell string, or the
// arguments as a YAML list.
func HookText(h Hook) string {
	if h.Args == nil {
		return h.Shell
	}
	q := make([]string, len(h.Args))
	for i, a := range h.Args {
		q[i] = shellQuote(a)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// typedPlain tells whether a plain scalar of this text could be read as
// something other than a string.
func typedPlain(v string) bool {
	switch strings.ToLower(v) {
	case "", "~", "null", "true", "false", "yes", "no", "on", "off":
		return true
	}
	_, err := strconv.ParseFloat(v, 64)
	return err == nil
}
