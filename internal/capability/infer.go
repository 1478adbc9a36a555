package capability

import (
	"cmp"
	"slices"
)

// Source says where a capability came from.
type Source string

const (
	Explicit Source = "explicit" // the user's settings
	Lockfile Source = "lockfile" // a package in a lockfile that wraps a system library
	ELF      Source = "elf"      // a shared object in the workspace needs a soname
	RunError Source = "error"    // a failed run's output names a missing library
)

// Finding is one reason to want a capability. Capability is "" when the
// evidence names a library no capability provides, so callers can still
// report it.
type Finding struct {
	Capability string
	Source     Source
	Evidence   string // "requirements.txt: psycopg2==2.9.9"
}

// Merge decides the capabilities a sandbox gets: every explicit one, and
// the inferred ones only when auto is set. Inference only adds; explicit
// settings are never dropped, and a capability both set and inferred is
// reported as explicit. findings explain each capability returned.
func Merge(explicit []string, inferred []Finding, auto bool) (caps []string, findings []Finding) {
	for _, c := range explicit {
		if c == "" {
			continue
		}
		caps = append(caps, c)
		findings = append(findings, Finding{Capability: c, Source: Explicit})
	}
	if auto {
		for _, f := range inferred {
			if f.Capability == "" || slices.Contains(explicit, f.Capability) {
				continue
			}
			caps = append(caps, f.Capability)
			findings = append(findings, f)
		}
	}
	slices.Sort(caps)
	caps = slices.Compact(caps)
	sortFindings(findings)
	return caps, slices.Compact(findings)
}

func sortFindings(fs []Finding) {
	slices.SortFunc(fs, func(a, b Finding) int {
		return cmp.Or(
			cmp.Compare(a.Capability, b.Capability),
			cmp.Compare(sourceRank(a.Source), sourceRank(b.Source)),
			cmp.Compare(a.Evidence, b.Evidence),
		)
	})
}

func sourceRank(s Source) int {
	switch s {
	case Explicit:
		return 0
	case Lockfile:
		return 1
	case ELF:
		return 2
	}
	return 3
}
