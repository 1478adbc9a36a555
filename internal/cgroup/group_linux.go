package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Bounds of the waiting loops in Kill and Remove. Each round sleeps twice
// as long as the one before, from 100µs up to 10ms, so killRounds rounds
// last at most about 2s and removeRounds about 1s.
const (
	killRounds   = 200
	removeRounds = 100
	firstDelay   = 100 * time.Microsecond
	maxDelay     = 10 * time.Millisecond
)

// Group is one sandbox's cgroup, present in each hierarchy its limits
// need.
type Group struct {
	name string
	// dirs are the group's directories, one per hierarchy, in creation
	// order.
	dirs []string
	// ctrl is the directory holding each limited controller's files, or
	// "" for a controller the group does not limit.
	ctrl [numCtrl]string
	// v2 is the directory among dirs in the cgroup2 tree, or "".
	v2 string
	// rmdir is unix.Rmdir except in tests.
	rmdir func(dir string) error
}

// New creates the group name under the "pinfold" parent of every
// hierarchy l needs, and writes the limits. name must be one path
// element of letters, digits, '-', '_' and '.'. A group named like an
// existing one fails with an error matching fs.ErrExist. On any failure,
// New removes the directories it made. A zero l gives a group with no
// directories, whose Join does nothing.
func (s *System) New(name string, l Limits) (*Group, error) {
	if err := validName(name); err != nil {
		return nil, fmt.Errorf("creating cgroup %s: %w", name, err)
	}
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("creating cgroup %s: %w", name, err)
	}
	g := &Group{name: name, rmdir: s.cfg.rmdir}
	var made []string
	if err := s.create(g, l, &made); err != nil {
		for i := len(made) - 1; i >= 0; i-- {
			// A parent another sandbox uses stays: rmdir fails with
			// EBUSY.
			s.cfg.rmdir(made[i])
		}
		return nil, fmt.Errorf("creating cgroup %s: %w", name, err)
	}
	return g, nil
}

// create makes g's directories, recording each one it made in *made,
// and writes l into them.
//
// The common case costs one mkdir per hierarchy and one open, write and
// close per limit. The parent and, on v2, the enabling of controllers are
// done only when the leaf's mkdir or the first write of a controller's
// file fails with ENOENT.
func (s *System) create(g *Group, l Limits, made *[]string) error {
	need := needs(l)
	var v2 ctrlSet
	for c := range numCtrl {
		if !need.has(c) {
			continue
		}
		m := s.v1[c]
		if m == "" {
			if !s.onV2(c) {
				return s.missing(c)
			}
			v2 |= 1 << c
			continue
		}
		dir := m + "/" + parentName + "/" + g.name
		if !slices.Contains(g.dirs, dir) { // controllers mounted together
			if err := s.mkdirGroup(dir, made, nil); err != nil {
				return err
			}
			g.dirs = append(g.dirs, dir)
		}
		g.ctrl[c] = dir
	}
	var enable func() error
	if v2 != 0 {
		base, err := s.v2Base()
		if err != nil {
			return err
		}
		parent := base + "/" + parentName
		done := false
		enable = func() error {
			if done {
				return nil
			}
			done = true
			return enableV2(v2, base, parent)
		}
		dir := parent + "/" + g.name
		if err := s.mkdirGroup(dir, made, enable); err != nil {
			return err
		}
		g.dirs = append(g.dirs, dir)
		g.v2 = dir
		for c := range numCtrl {
			if v2.has(c) {
				g.ctrl[c] = dir
			}
		}
	}
	return g.setLimits(l, enable)
}

// mkdirGroup makes the group directory dir, and its parent when missing;
// it then calls afterParent, if set, before making dir.
func (s *System) mkdirGroup(dir string, made *[]string, afterParent func() error) error {
	err := s.cfg.mkdir(dir)
	if err == unix.ENOENT {
		parent := dir[:strings.LastIndexByte(dir, '/')]
		switch perr := s.cfg.mkdir(parent); perr {
		case nil:
			*made = append(*made, parent)
		case unix.EEXIST: // made at the same moment by another sandbox
		default:
			return &fs.PathError{Op: "mkdir", Path: parent, Err: perr}
		}
		if afterParent != nil {
			if err := afterParent(); err != nil {
				return err
			}
		}
		err = s.cfg.mkdir(dir)
	}
	if err != nil {
		return &fs.PathError{Op: "mkdir", Path: dir, Err: err}
	}
	*made = append(*made, dir)
	return nil
}

// enableV2 enables the controllers in set for the children of base and
// of parent, its "pinfold" directory.
func enableV2(set ctrlSet, base, parent string) error {
	req := set.enableString()
	for _, dir := range []string{base, parent} {
		err := writeFile(dir+"/cgroup.subtree_control", req)
		if errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("enabling %s: %w (cgroup v2 enables controllers only below cgroups without processes of their own)", set, err)
		}
		if err != nil {
			return fmt.Errorf("enabling %s: %w", set, err)
		}
	}
	return nil
}

// Write is one value a group's limits write into one of its files, in
// the order they must be written.
type Write struct {
	Dir   int    // the index of the directory in Dirs
	File  string // the file's name in it
	Value string
	// Optional writes may find no file (ENOENT): the kernel then has
	// nothing of that kind to cap (swap that is not accounted).
	Optional bool
}

// Writes lists what New wrote into the group for l: the same files with
// the same values, for a process that makes the group again in New's
// place (the native runtime's replay of a launch record, initc/launch.c).
func (g *Group) Writes(l Limits) []Write {
	var w []Write
	add := func(dir, file string, v []byte, optional bool) {
		w = append(w, Write{Dir: slices.Index(g.dirs, dir), File: file, Value: string(v), Optional: optional})
	}
	var b [48]byte
	if dir := g.ctrl[ctrlMemory]; dir != "" {
		v := strconv.AppendInt(b[:0], l.MemoryBytes, 10)
		// The swap file is missing when the kernel does not account
		// swap; then there is nothing to cap.
		if dir == g.v2 {
			add(dir, "memory.max", v, false)
			add(dir, "memory.swap.max", []byte("0"), true)
		} else {
			// memory.memsw.limit_in_bytes may not go below
			// memory.limit_in_bytes, so it comes second.
			add(dir, "memory.limit_in_bytes", v, false)
			add(dir, "memory.memsw.limit_in_bytes", v, true)
		}
	}
	if dir := g.ctrl[ctrlPids]; dir != "" {
		add(dir, "pids.max", strconv.AppendInt(b[:0], l.Pids, 10), false)
	}
	if dir := g.ctrl[ctrlCPU]; dir != "" {
		v := strconv.AppendInt(b[:0], l.cpuQuotaUs(), 10)
		if dir == g.v2 {
			v = append(v, ' ')
			add(dir, "cpu.max", strconv.AppendInt(v, cpuPeriodUs, 10), false)
		} else {
			// A new v1 group has the default period, cpuPeriodUs.
			add(dir, "cpu.cfs_quota_us", v, false)
		}
	}
	return w
}

// setLimits writes l into g's directories (Writes). On v2, a missing
// interface file means the controller is not enabled in the parent yet:
// enable is called once and the write retried.
func (g *Group) setLimits(l Limits, enable func() error) error {
	for _, w := range g.Writes(l) {
		dir := g.dirs[w.Dir]
		path := dir + "/" + w.File
		err := writeFile(path, []byte(w.Value))
		if w.Optional && errors.Is(err, unix.ENOENT) {
			continue
		}
		if enable != nil && dir == g.v2 && errors.Is(err, unix.ENOENT) {
			if err = enable(); err != nil {
				return err
			}
			err = writeFile(path, []byte(w.Value))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Name returns the name the group was created with.
func (g *Group) Name() string { return g.name }

// ProcsFiles returns the cgroup.procs files, one per hierarchy, that a
// process must be written into to join the group. A process can join
// itself, before it executes the sandboxed command, by writing "0" into
// each.
func (g *Group) ProcsFiles() []string {
	files := make([]string, len(g.dirs))
	for i, dir := range g.dirs {
		files[i] = dir + "/cgroup.procs"
	}
	return files
}

// JoinFiles splits the group's membership files by how a new process
// best enters them: tasks are v1 "tasks" files a single-threaded process
// writes "0" into to move itself (a thread's move takes no threadgroup
// lock, so it does not wait for an RCU grace period as a write of a pid
// to a v1 cgroup.procs does, milliseconds on a busy host); procs are the
// cgroup.procs files a pid is written into (v2's).
func (g *Group) JoinFiles() (tasks, procs []string) {
	for _, dir := range g.dirs {
		if dir == g.v2 {
			procs = append(procs, dir+"/cgroup.procs")
		} else {
			tasks = append(tasks, dir+"/tasks")
		}
	}
	return tasks, procs
}

// Dirs returns the group's directories, one per hierarchy, in creation
// order: what a process that removes the group in Remove's place (the
// native runtime's C waiter) removes, last first.
func (g *Group) Dirs() []string { return slices.Clone(g.dirs) }

// EventFiles returns the files whose counters Stats reads for the limits a
// command can hit: memory's oom_kill (v2 memory.events, v1
// memory.oom_control) and pids' max (pids.events), "" for a controller the
// group does not limit.
func (g *Group) EventFiles() (memory, pids string) {
	if dir := g.ctrl[ctrlMemory]; dir != "" {
		memory = dir + "/memory.oom_control"
		if dir == g.v2 {
			memory = dir + "/memory.events"
		}
	}
	if dir := g.ctrl[ctrlPids]; dir != "" {
		pids = dir + "/pids.events"
	}
	return memory, pids
}

// Join moves the process pid, with all its threads, into the group.
func (g *Group) Join(pid int) error {
	for _, dir := range g.dirs {
		if err := writeInt(dir+"/cgroup.procs", int64(pid)); err != nil {
			return fmt.Errorf("joining cgroup %s: %w", g.name, err)
		}
	}
	return nil
}

// Stats reads the group's counters. Call it after the run and before
// Remove.
func (g *Group) Stats() (Stats, error) {
	var st Stats
	var err error
	read := func(path, key string) int64 {
		if err != nil {
			return 0
		}
		var b []byte
		b, err = readFile(path, 512)
		v, _ := keyValue(b, key)
		return v
	}
	if dir := g.ctrl[ctrlMemory]; dir == g.v2 && dir != "" {
		st.OOMKills = read(dir+"/memory.events", "oom_kill")
		if err == nil {
			st.MemoryPeak, err = readInt(dir + "/memory.peak")
			if errors.Is(err, unix.ENOENT) { // before Linux 5.19
				err = nil
			}
		}
	} else if dir != "" {
		st.OOMKills = read(dir+"/memory.oom_control", "oom_kill")
		if err == nil {
			st.MemoryPeak, err = readInt(dir + "/memory.max_usage_in_bytes")
		}
	}
	if dir := g.ctrl[ctrlPids]; dir != "" {
		st.PidsMaxHits = read(dir+"/pids.events", "max")
	}
	if dir := g.ctrl[ctrlCPU]; dir != "" {
		st.CPUThrottled = read(dir+"/cpu.stat", "nr_throttled")
	}
	if err != nil {
		return Stats{}, fmt.Errorf("reading cgroup %s stats: %w", g.name, err)
	}
	return st, nil
}

// readInt reads a file holding one decimal number.
func readInt(path string) (int64, error) {
	b, err := readFile(path, 32)
	if err != nil {
		return 0, err
	}
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0, &fs.PathError{Op: "parse", Path: path, Err: err}
	}
	return v, nil
}

// Kill kills every process in the group and waits, a bounded time, until
// none is left. On v2 it writes cgroup.kill (Linux 5.14 and later), which
// also catches processes forked meanwhile; otherwise, and on v1, it sends
// SIGKILL to each process listed in cgroup.procs, round after round. It
// must not be called from a process inside the group. A group already
// removed counts as empty.
func (g *Group) Kill() error {
	var errs []error
	for _, dir := range g.dirs {
		if err := killDir(dir, dir == g.v2); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("killing cgroup %s: %w", g.name, err)
	}
	return nil
}

func killDir(dir string, v2 bool) error {
	if v2 {
		err := writeFile(dir+"/cgroup.kill", []byte("1"))
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
	}
	delay := firstDelay
	for range killRounds {
		b, err := readFile(dir+"/cgroup.procs", 512)
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return err
		}
		if !hasPids(b) {
			return nil
		}
		// Killed processes leave cgroup.procs when they exit, not when
		// they become zombies, so a listed process may have been
		// signalled already; killing it again is harmless.
		eachPid(b, func(pid int) {
			if pid > 0 {
				unix.Kill(pid, unix.SIGKILL)
			}
		})
		time.Sleep(delay)
		delay = min(2*delay, maxDelay)
	}
	return fmt.Errorf("processes remain in %s", dir)
}

// Remove deletes the group's directories. Directories already gone are
// fine; a directory whose processes are still exiting (EBUSY) is retried
// for about a second. The group must have no processes: call Kill first.
func (g *Group) Remove() error {
	var errs []error
	for i := len(g.dirs) - 1; i >= 0; i-- {
		if err := rmdirRetry(g.dirs[i], g.rmdir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("removing cgroup %s: %w", g.name, err)
	}
	return nil
}

func rmdirRetry(dir string, rmdir func(string) error) error {
	delay := firstDelay
	for i := 0; ; i++ {
		err := rmdir(dir)
		switch {
		case err == nil, err == unix.ENOENT:
			return nil
		case (err == unix.EBUSY || err == unix.EINTR) && i < removeRounds:
			time.Sleep(delay)
			delay = min(2*delay, maxDelay)
		default:
			return &fs.PathError{Op: "rmdir", Path: dir, Err: err}
		}
	}
}

// Clean removes stale groups: every group under a "pinfold" parent whose
// name alive reports false. It kills a stale group's processes first. It
// returns the names of the groups removed; groups it could not remove
// are named in the error.
func (s *System) Clean(alive func(name string) bool) ([]string, error) {
	var parents []string
	v2parent := ""
	for c := range numCtrl {
		if m := s.v1[c]; m != "" {
			if p := m + "/" + parentName; !slices.Contains(parents, p) {
				parents = append(parents, p)
			}
		} else if s.onV2(c) && v2parent == "" {
			// Without a usable base no group could have been made.
			if base, err := s.v2Base(); err == nil {
				v2parent = base + "/" + parentName
				parents = append(parents, v2parent)
			}
		}
	}
	var errs []error
	groups := map[string]*Group{}
	var names []string
	for _, p := range parents {
		entries, err := os.ReadDir(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range entries {
			name := e.Name()
			if !e.IsDir() || validName(name) != nil {
				continue
			}
			g := groups[name]
			if g == nil {
				g = &Group{name: name, rmdir: s.cfg.rmdir}
				groups[name] = g
				names = append(names, name)
			}
			dir := p + "/" + name
			g.dirs = append(g.dirs, dir)
			if p == v2parent {
				g.v2 = dir
			}
		}
	}
	slices.Sort(names)
	var removed []string
	for _, name := range names {
		if alive(name) {
			continue
		}
		g := groups[name]
		if err := g.Kill(); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := g.Remove(); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, name)
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("cleaning stale cgroups: %w", err)
	}
	return removed, nil
}
