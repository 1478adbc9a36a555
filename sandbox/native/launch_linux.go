package native

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	initp "github.com/pinfold/pinfold/internal/backend/native"
	"github.com/pinfold/pinfold/internal/cgroup"
	"github.com/pinfold/pinfold/sandbox"
)

// Launch records (see initp.LaunchRecord and initc/launch.c) let a run
// that ran before start without the Go runtime: the binary's entry point
// replays what this process sent its sandbox init, as long as nothing the
// plan was made from has changed. The caller's record (sandbox.LaunchRecord)
// brings the key and what the plan was read from; this file adds what the
// sandbox itself depends on: the host's system directories, the pinfold
// binary, the workspace and the mount sources (by type, mode and owner:
// their times change without changing the plan).

// racyAge is how old every dependency's last change must be: a second
// change within the same timestamp tick as the record's read would look
// the same, and some filesystems keep times in whole (FAT: two) seconds.
const racyAge = 2 * time.Second

// launchDeps gathers the dependencies of one record.
type launchDeps struct {
	deps []initp.Dep
	ok   bool
	// spec: the root's layout depends on nothing else (specDeps).
	spec bool
}

// add reads one dependency; a failure makes the run unrecordable.
func (l *launchDeps) add(kind initp.DepKind, path string) initp.Dep {
	d, err := initp.StatDep(kind, path)
	if err != nil {
		l.ok = false
	}
	l.deps = append(l.deps, d)
	return d
}

// callerDep is a dependency the caller read, as a record checks it.
func callerDep(d sandbox.LaunchDep) (initp.Dep, bool) {
	kind := map[sandbox.LaunchCheck]initp.DepKind{sandbox.LaunchStat: initp.DepStat,
		sandbox.LaunchLstat: initp.DepLstat, sandbox.LaunchAttr: initp.DepAttr}[d.Check]
	if kind == 0 {
		return initp.Dep{}, false
	}
	if d.Info == nil {
		if kind == initp.DepLstat {
			return initp.Dep{Kind: initp.DepLabsent, Path: d.Path}, true
		}
		return initp.Dep{Kind: initp.DepAbsent, Path: d.Path}, true
	}
	st, ok := d.Info.Sys().(*syscall.Stat_t)
	if !ok {
		return initp.Dep{}, false
	}
	dep := initp.Dep{Kind: kind, Path: d.Path, Stat: unix.Stat_t{Mode: st.Mode, Uid: st.Uid, Gid: st.Gid}}
	if kind != initp.DepAttr {
		s := &dep.Stat
		s.Dev, s.Ino, s.Size = st.Dev, st.Ino, st.Size
		s.Mtim = unix.Timespec{Sec: st.Mtim.Sec, Nsec: st.Mtim.Nsec}
		s.Ctim = unix.Timespec{Sec: st.Ctim.Sec, Nsec: st.Ctim.Nsec}
	}
	return dep, true
}

// hostDeps reads what every sandbox on the host base depends on.
func (l *launchDeps) hostDeps() {
	// The host base shows these as they are: directories (with their
	// mode), symbolic links (with their target) or nothing.
	for _, d := range sandbox.HostSystemDirs() {
		if l.add(initp.DepLattr, "/"+d).Stat.Mode&unix.S_IFMT == unix.S_IFLNK {
			l.add(initp.DepLink, "/"+d)
		}
	}
	// Where the init mounts its staging root: the first directory.
	for _, d := range []string{"/tmp", "/mnt", "/dev"} {
		if l.add(initp.DepLattr, d).Stat.Mode&unix.S_IFMT == unix.S_IFDIR {
			break
		}
	}
	// The binary: replaced (an upgrade) or moved (its masked path).
	l.add(initp.DepLink, "/proc/self/exe")
	l.add(initp.DepStat, "/proc/self/exe")
}

// specDeps reads the host paths of the spec, and reports whether the
// root's layout depends on nothing else: they are canonical and outside
// the system directories.
func (l *launchDeps) specDeps(sp *sandbox.Spec) bool {
	// The workspace is checked even without access: the sandbox checks it.
	var paths, points []string
	if sp.Workspace != "" {
		paths = append(paths, sp.Workspace)
	}
	if sp.Access != sandbox.AccessNone {
		points = append(points, sp.Workspace)
	}
	for _, m := range sp.Mounts {
		paths, points = append(paths, m.Source), append(points, m.Target)
	}
	for _, pt := range points {
		for _, d := range sandbox.HostSystemDirs() {
			if pt == "/"+d || strings.HasPrefix(pt, "/"+d+"/") {
				return false
			}
		}
	}
	for _, path := range paths {
		if !filepath.IsAbs(path) || evalSymlinks(path) != path {
			return false
		}
		if l.add(initp.DepAttr, path).Kind != initp.DepAttr {
			return false
		}
	}
	return true
}

func evalSymlinks(p string) string {
	if real, err := filepath.EvalSymlinks(p); err == nil {
		return real
	}
	return p
}

// record stores the launch record of p, whose command has just started,
// if the sandbox can be replayed and every dependency still reads as it
// did, none having changed too recently to tell. Nothing is recorded
// otherwise.
func (p *Process) record(o *sandbox.HandoffOptions) {
	rec, sp := o.Record, &p.sb.spec
	// An init started from this command line's config hint, whose config
	// was ours, needs no hint written: the launcher's files hold these
	// bytes (reading them to compare costs a run's critical path
	// 0.05-0.1 ms while a short command ends).
	if p.inst.init.Hinted() == 0 {
		p.writeSpawnHint()
		if rec != nil {
			p.writeConfigHint(rec.Prefix, rec.Cwd)
		}
	}
	if runtime.GOARCH != "amd64" || sp.Base.Kind != sandbox.BaseHost {
		return // the launcher is built for amd64, and on the host base only
	}
	l := &launchDeps{ok: true}
	for _, d := range rec.Deps {
		dep, ok := callerDep(d)
		if !ok {
			return
		}
		l.deps = append(l.deps, dep)
	}
	// The caller read its dependencies before the plan was made: each
	// must still read the same. The host's are read now, or were while
	// the command started (prepareRecord).
	for _, d := range l.deps {
		now, err := initp.StatDep(d.Kind, d.Path)
		if err != nil || !now.Same(d) {
			return
		}
	}
	host := p.prepared
	if host == nil {
		host = readHostDeps(sp)
	}
	if !host.ok || !host.spec {
		return
	}
	l.deps = append(l.deps, host.deps...)
	for _, d := range l.deps {
		if rec.Started.Sub(d.Changed()) < racyAge {
			return
		}
	}
	spawn, cfg, exec := p.inst.init.Sent()
	var cg *initp.LaunchCgroup
	if g := p.inst.cg; g != nil {
		// The replay joins the init to groups of its own: the recorded
		// config must not name this run's.
		var err error
		if cg = launchCgroup(g, p.sb.limits, o); cg == nil {
			return
		}
		if cfg, err = initp.StripCgroups(cfg); err != nil {
			return
		}
		if spawn, err = initp.StripCgroupSelf(spawn); err != nil {
			return
		}
	}
	r := &initp.LaunchRecord{
		Prefix: rec.Prefix, Cwd: rec.Cwd, Environ: rec.Environ, Deps: l.deps, Empty: rec.Empty,
		Spawn: spawn, Config: cfg, Exec: exec,
		AnyCommand: rec.AnyCommand, Stdin: rec.Stdin, Timeout: p.timeout,
		TimeoutMsg: o.TimeoutMsg, TmpFullMsg: o.TmpFullMsg, Cgroup: cg,
	}
	storeDir, err := p.sb.storeDir()
	if err != nil {
		return
	}
	if sp.Access == sandbox.AccessChangeset {
		if len(o.Finish) != 3 || o.Finish[1] != storeDir || rec.MetaTail == "" {
			return
		}
		if r.Changeset = launchChangeset(cfg, o.Finish[0], storeDir, o.Finish[2], rec.MetaTail); r.Changeset == nil {
			return
		}
	}
	if sp.Network != sandbox.NetworkNone {
		// Replayed through the shared helper only: one of its own would
		// be this process's child.
		if p.inst.net == nil {
			return
		}
		sock, cfgMsg, ok := p.inst.net.Shared()
		if !ok {
			return
		}
		r.Net = &initp.LaunchNet{Sock: sock, Runs: filepath.Join(storeDir, "runs"), Config: cfgMsg}
	}
	dir := filepath.Join(storeDir, "launch")
	initp.WriteLaunch(dir, r)
	if p.prepared == nil {
		initp.TrimLaunches(dir)
	}
}

// readHostDeps reads what a record of a sandbox of sp depends on besides
// what the caller read: the host's system directories and binary, the
// workspace and the mount sources.
func readHostDeps(sp *sandbox.Spec) *launchDeps {
	l := &launchDeps{ok: true}
	l.hostDeps()
	l.spec = l.specDeps(sp)
	return l
}

// prepareRecord reads the host's dependencies of the launch record that
// Handoff writes once the command runs, while the init starts it: on a
// two-core machine the init's fork and exec of the command take longer,
// and a short command would otherwise end before its waiter exists.
func (p *Process) prepareRecord() {
	if runtime.GOARCH != "amd64" || p.sb.spec.Base.Kind != sandbox.BaseHost {
		return
	}
	p.prepared = readHostDeps(&p.sb.spec)
	// And what the write needs besides: the boot id of its key, and room
	// among the store's records (the trim reads the directory: 0.1 ms).
	initp.BootID()
	if dir, err := p.sb.storeDir(); err == nil {
		initp.TrimLaunches(filepath.Join(dir, "launch"))
	}
}

// launchCgroup describes how a replay makes groups like g, made for l:
// their parents, the same files written with the same values, and what
// the waiter reports from. nil when the group is not one a replay can
// make the same way.
func launchCgroup(g *cgroup.Group, l cgroup.Limits, o *sandbox.HandoffOptions) *initp.LaunchCgroup {
	dirs := g.Dirs()
	c := &initp.LaunchCgroup{OOMMsg: o.OOMMsg, MemoryMsg: o.MemoryMsg, PidsMsg: o.PidsMsg}
	for _, d := range dirs {
		if filepath.Base(d) != g.Name() {
			return nil
		}
		c.Parents = append(c.Parents, filepath.Dir(d))
	}
	for _, w := range g.Writes(l) {
		if w.Dir < 0 {
			return nil
		}
		c.Writes = append(c.Writes, initp.CgroupWrite{CgroupFile: initp.CgroupFile{Dir: w.Dir, File: w.File},
			Value: w.Value, Optional: w.Optional})
	}
	file := func(path string) (initp.CgroupFile, bool) {
		if path == "" {
			return initp.CgroupFile{}, true
		}
		i := slices.Index(dirs, filepath.Dir(path))
		return initp.CgroupFile{Dir: i, File: filepath.Base(path)}, i >= 0
	}
	mem, pids := g.EventFiles()
	var ok1, ok2 bool
	c.MemoryEvents, ok1 = file(mem)
	c.PidsEvents, ok2 = file(pids)
	if !ok1 || !ok2 || mem != "" && (c.OOMMsg == "" || c.MemoryMsg == "") || pids != "" && c.PidsMsg == "" {
		return nil
	}
	return c
}

// launchChangeset describes how a replay makes a changeset like the one
// this run made (id): where the id stands in the config message (only in
// paths under the store's changesets), the owner and mode of its upper
// directory, and meta.json after its command (metaTail, which the
// changeset package made for it). nil when anything does not match.
func launchChangeset(cfg []byte, exe, storeDir, id, metaTail string) *initp.LaunchChangeset {
	if len(id) != initp.ChangesetIDLen {
		return nil
	}
	c := &initp.LaunchChangeset{Store: storeDir, Exe: exe, MetaTail: metaTail}
	prefix := []byte(filepath.Join(storeDir, "changesets") + "/")
	for off := 0; ; {
		i := bytes.Index(cfg[off:], []byte(id))
		if i < 0 {
			break
		}
		at := off + i
		if at < len(prefix) || !bytes.Equal(cfg[at-len(prefix):at], prefix) {
			return nil
		}
		c.IDOffsets = append(c.IDOffsets, uint32(at))
		off = at + len(id)
	}
	if len(c.IDOffsets) == 0 {
		return nil
	}
	var st unix.Stat_t
	if unix.Lstat(filepath.Join(storeDir, "changesets", id, "r0", "upper"), &st) != nil {
		return nil
	}
	c.UID, c.GID, c.UpperMode = st.Uid, st.Gid, st.Mode&0o1777
	return c
}

// writeSpawnHint stores the spawn message of p's init as the store's
// spawn hint, from which the launcher starts the next first run's init
// before the Go runtime starts (initp.SpawnFirst). Only the CLI's runs
// write one: a recorded run, or a traced one (a hint of its own).
func (p *Process) writeSpawnHint() {
	if runtime.GOARCH != "amd64" {
		return // the launcher is built for amd64
	}
	spawn, _, _ := p.inst.init.Sent()
	if p.inst.cg != nil || len(spawn) == 0 {
		return // a run with limits names its own cgroups
	}
	storeDir, err := p.sb.storeDir()
	if err != nil {
		return
	}
	initp.WriteSpawnHint(storeDir, p.sb.spec.Trace, spawn)
}

// writeConfigHint stores the spawn and config messages of p's init as the
// config hint of the run's flags (prefix: the command line through "--")
// in its directory (initp.ConfigHintFile), from which the launcher
// pre-spawns the next first run's init with its config: the init builds
// the root while the Go runtime starts, and the Go side sends only the
// command when its own config is the same bytes (initp.ErrConfigHint
// otherwise). Only for a root that the next run may build as it is: on
// the host base, with nothing of this run's own (no changeset or capture,
// whose upper directories are this run's, no cgroups, no network device,
// no writes to the base).
func (p *Process) writeConfigHint(prefix []string, cwd string) {
	sp := &p.sb.spec
	if runtime.GOARCH != "amd64" || cwd == "" || len(prefix) == 0 {
		return
	}
	if sp.Base.Kind != sandbox.BaseHost || sp.Access == sandbox.AccessChangeset || len(sp.Captures) > 0 ||
		sp.BaseWrites != "" || sp.Scratch != "" || p.inst.cg != nil || p.inst.net != nil || p.sb.net != nil {
		return
	}
	spawn, cfg, _ := p.inst.init.Sent()
	storeDir, err := p.sb.storeDir()
	if err != nil {
		return
	}
	initp.WriteConfigHint(storeDir, sp.Trace, prefix, cwd, spawn, cfg)
}

// writeTraceConfigHint is writeConfigHint for a traced run of pinfold's
// command line (which records no launch): its flags are os.Args through
// "--" (a wrong guess only names a hint no launcher reads).
func (p *Process) writeTraceConfigHint() {
	if len(os.Args) < 2 || os.Args[1] != "run" {
		return
	}
	cmd := slices.Index(os.Args, "--")
	cwd, err := unix.Getwd()
	if cmd < 0 || err != nil {
		return
	}
	p.writeConfigHint(os.Args[1:cmd+1], cwd)
}
