// Package capability maps named system-level needs (postgres,
// imagecodecs, xml...) to the OS packages that meet them on each curated
// base, and infers which ones a workspace needs from its lockfiles, from
// the shared objects in its environments, and from a failed run's output.
//
// The catalog and the inference tables are arrays of constants: the
// package does no work at start-up.
package capability

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/pinfold/pinfold/internal/suggest"
)

// Base names a curated base the catalog knows.
type Base string

// Debian12 is Debian 12 (bookworm).
const Debian12 Base = "debian-12"

// Capability is one entry of the catalog.
type Capability struct {
	Name        string
	Description string
	// Sonames are the shared objects the runtime packages install; a
	// DT_NEEDED entry or a loader error naming one maps back here. No
	// soname belongs to two capabilities.
	Sonames []string
	// Aliases are other names people use ("postgresql", "openssl"); they
	// only feed "did you mean".
	Aliases  []string
	Installs []Install
}

// Install lists the packages that give one base a capability.
type Install struct {
	Base Base
	// Runtime packages hold the libraries (and, for a few capabilities,
	// the programs) that run-time code loads.
	Runtime []string
	// Build packages hold headers and tools to compile against the
	// runtime ones; installs that build from source need both.
	Build []string
}

// Errors callers branch on.
var (
	ErrUnknown     = errors.New("unknown capability")
	ErrUnavailable = errors.New("not available")
)

// Names returns the names of every capability, sorted.
func Names() []string {
	names := make([]string, len(catalog))
	for i := range catalog {
		names[i] = catalog[i].Name
	}
	return names
}

// Lookup returns the capability called name. The result is a copy the
// caller may change.
func Lookup(name string) (Capability, bool) {
	c := find(name)
	if c == nil {
		return Capability{}, false
	}
	out := *c
	out.Sonames = slices.Clone(c.Sonames)
	out.Aliases = slices.Clone(c.Aliases)
	out.Installs = make([]Install, len(c.Installs))
	for i, in := range c.Installs {
		out.Installs[i] = Install{Base: in.Base, Runtime: slices.Clone(in.Runtime), Build: slices.Clone(in.Build)}
	}
	return out, true
}

// Packages returns the packages that give base the capability called
// name: the runtime ones, followed by the build ones when build is set.
func Packages(name string, base Base, build bool) ([]string, error) {
	c := find(name)
	if c == nil {
		if s := Suggest(name); s != "" {
			return nil, fmt.Errorf("%w %q (did you mean %q?)", ErrUnknown, name, s)
		}
		return nil, fmt.Errorf("%w %q (see pinfold capability list)", ErrUnknown, name)
	}
	for _, in := range c.Installs {
		if in.Base != base {
			continue
		}
		pkgs := slices.Clone(in.Runtime)
		if build {
			for _, p := range in.Build {
				if !slices.Contains(pkgs, p) {
					pkgs = append(pkgs, p)
				}
			}
		}
		return pkgs, nil
	}
	bases := make([]string, len(c.Installs))
	for i, in := range c.Installs {
		bases[i] = string(in.Base)
	}
	return nil, fmt.Errorf("capability %q is %w on base %q; it is packaged for %s", name, ErrUnavailable, base, strings.Join(bases, ", "))
}

// BySoname returns the capability whose packages install soname. It
// tolerates a longer version ("libpq.so.5.15" is libpq.so.5) and a bare
// development name ("libpq.so"), but not another major version.
func BySoname(soname string) (string, bool) {
	if i := strings.LastIndexByte(soname, '/'); i >= 0 {
		soname = soname[i+1:]
	}
	if !strings.Contains(soname, ".so") {
		return "", false
	}
	for s := soname; ; {
		for i := range catalog {
			if slices.Contains(catalog[i].Sonames, s) {
				return catalog[i].Name, true
			}
		}
		// Drop one version component, but stop at the bare ".so".
		j := strings.LastIndexByte(s, '.')
		if j < 0 || strings.HasSuffix(s, ".so") {
			break
		}
		s = s[:j]
	}
	if strings.HasSuffix(soname, ".so") {
		prefix := soname + "."
		for i := range catalog {
			for _, s := range catalog[i].Sonames {
				if strings.HasPrefix(s, prefix) {
					return catalog[i].Name, true
				}
			}
		}
	}
	return "", false
}

// Suggest returns the capability someone who typed name probably meant,
// or "". It knows aliases, package names, sonames and typos.
func Suggest(name string) string {
	n := strings.ToLower(strings.TrimSpace(name))
	if n == "" {
		return ""
	}
	if c := find(n); c != nil {
		return c.Name
	}
	for i := range catalog {
		c := &catalog[i]
		if slices.Contains(c.Aliases, n) {
			return c.Name
		}
		for _, in := range c.Installs {
			if slices.Contains(in.Runtime, n) || slices.Contains(in.Build, n) {
				return c.Name
			}
		}
	}
	if c, ok := BySoname(n); ok {
		return c
	}
	best, bestDist := "", len(n)/3+1
	for i := range catalog {
		words := append([]string{catalog[i].Name}, catalog[i].Aliases...)
		for _, w := range words {
			if d := suggest.Distance(n, w); d < bestDist {
				best, bestDist = catalog[i].Name, d
			}
		}
	}
	return best
}

func find(name string) *Capability {
	i, ok := slices.BinarySearchFunc(catalog[:], name, func(c Capability, n string) int {
		return strings.Compare(c.Name, n)
	})
	if !ok {
		return nil
	}
	return &catalog[i]
}
