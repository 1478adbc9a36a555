//go:build !linux

package cgroup

import "fmt"

// System is where this host keeps its controllers; only Linux has any.
type System struct{}

// Group is one sandbox's cgroup; only Linux has any.
type Group struct{}

// Detect fails with ErrUnsupported: control groups exist only on Linux.
func Detect() (*System, error) {
	return nil, fmt.Errorf("detecting cgroups: %w", ErrUnsupported)
}

// Version returns "none".
func (s *System) Version() string { return "none" }

// Supports fails with ErrUnsupported unless l is zero.
func (s *System) Supports(l Limits) error {
	if l.Zero() {
		return nil
	}
	return ErrUnsupported
}

// New fails with ErrUnsupported.
func (s *System) New(name string, l Limits) (*Group, error) {
	return nil, fmt.Errorf("creating cgroup %s: %w", name, ErrUnsupported)
}

// Clean does nothing.
func (s *System) Clean(alive func(name string) bool) ([]string, error) { return nil, nil }

// Name returns "".
func (g *Group) Name() string { return "" }

// ProcsFiles returns nil.
func (g *Group) ProcsFiles() []string { return nil }

// JoinFiles returns nothing.
func (g *Group) JoinFiles() (tasks, procs []string) { return nil, nil }

// Dirs returns nil.
func (g *Group) Dirs() []string { return nil }

// EventFiles returns no files.
func (g *Group) EventFiles() (memory, pids string) { return "", "" }

// Join fails with ErrUnsupported.
func (g *Group) Join(pid int) error { return ErrUnsupported }

// Stats returns zero counters.
func (g *Group) Stats() (Stats, error) { return Stats{}, nil }

// Kill does nothing.
func (g *Group) Kill() error { return nil }

// Remove does nothing.
func (g *Group) Remove() error { return nil }

// Write is one value a group's limits write into one of its files.
type Write struct {
	Dir         int
	File, Value string
	Optional    bool
}

// Writes returns nil.
func (g *Group) Writes(l Limits) []Write { return nil }
