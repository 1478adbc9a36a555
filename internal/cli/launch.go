package cli

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/pinfold/pinfold/internal/backend/native"
	"github.com/pinfold/pinfold/internal/config"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/internal/store"
	"github.com/pinfold/pinfold/sandbox"
	"golang.org/x/sys/unix"
)

// Launch records (see native.LaunchRecord and initc/launch.c) let a run
// that ran before start without the Go runtime: the binary's entry point
// replays what this run sent its sandbox init, as long as nothing the plan
// was made from has changed. A run is recorded only when everything that
// decides its plan is checked by the record: the command line, directory,
// environment and ids (the key), the config files found walking up (or
// their absence), the pinfold binary (these by their stat), the host's system directories, the
// workspace and the mount sources (by type, mode and owner: their times
// change without changing the plan).

// noLaunchCache turns launch records off, for both sides.
const noLaunchCache = "PINFOLD_NO_LAUNCH_CACHE"

// racyAge is how old every dependency's last change must be: a second
// change within the same timestamp tick as the record's read would look
// the same, and some filesystems keep times in whole (FAT: two) seconds.
const racyAge = 2 * time.Second

// launchRecorder gathers what a run's launch record depends on.
type launchRecorder struct {
	prefix []string // os.Args[1:] through the first "--"
	cwd    string
	store  string
	start  time.Time
	deps   []native.Dep
	ok     bool
}

// newLaunchRecorder starts recording a run of rest (the command after the
// flags), or returns nil when this run cannot be recorded at all. It reads
// the dependencies that decide the plan before the plan is made, so that
// a change while the plan is made shows when they are read again.
func newLaunchRecorder(args, rest []string, configFlag string) *launchRecorder {
	if _, off := os.LookupEnv(noLaunchCache); off || runtime.GOARCH != "amd64" || len(os.Args) < 2 ||
		os.Args[1] != "run" || !slices.Equal(os.Args[2:], args) {
		return nil
	}
	// The command follows the first "--", as launch.c finds it; that "--"
	// must be where the flags ended, not the value of one (--hostname --).
	cmd := slices.Index(os.Args, "--") + 1
	if cmd <= 0 || !slices.Equal(os.Args[cmd:], rest) {
		return nil
	}
	var o runOptions
	if left, err := runFlags("run", &o).Parse(os.Args[2 : cmd-1]); err != nil || len(left) > 0 {
		return nil
	}
	cwd, err := unix.Getwd()
	if err != nil {
		return nil
	}
	if wd, err := os.Getwd(); err != nil || evalSymlinks(wd) != cwd {
		return nil // resolve would walk from another directory
	}
	dir, err := store.DefaultDir()
	if err != nil {
		return nil
	}
	lr := &launchRecorder{prefix: os.Args[1:cmd], cwd: cwd, store: dir, start: time.Now(), ok: true}
	if configFlag != "" {
		lr.dep(native.DepStat, configFlag)
	} else {
		// What config.Find sees: the first pinfold.yaml walking up.
		for d := cwd; ; d = filepath.Dir(d) {
			if lr.dep(native.DepStat, filepath.Join(d, config.FileName)).Kind == native.DepStat || d == "/" {
				break
			}
		}
	}
	// The host base shows these as they are: directories (with their
	// mode), symbolic links (with their target) or nothing.
	for _, d := range sandbox.HostSystemDirs() {
		if lr.dep(native.DepLattr, "/"+d).Stat.Mode&unix.S_IFMT == unix.S_IFLNK {
			lr.dep(native.DepLink, "/"+d)
		}
	}
	// Where the init mounts its staging root: the first directory.
	for _, d := range []string{"/tmp", "/mnt", "/dev"} {
		if lr.dep(native.DepLattr, d).Stat.Mode&unix.S_IFMT == unix.S_IFDIR {
			break
		}
	}
	// The binary: replaced (an upgrade) or moved (its masked path).
	lr.dep(native.DepLink, "/proc/self/exe")
	lr.dep(native.DepStat, "/proc/self/exe")
	return lr
}

func evalSymlinks(p string) string {
	if real, err := filepath.EvalSymlinks(p); err == nil {
		return real
	}
	return p
}

// dep reads one dependency; a failure makes the run unrecordable.
func (lr *launchRecorder) dep(kind native.DepKind, path string) native.Dep {
	d, err := native.StatDep(kind, path)
	if err != nil {
		lr.ok = false
	}
	lr.deps = append(lr.deps, d)
	return d
}

// plan adds what the plan reads from the host and reports whether the
// run can be recorded: a sandbox on the host base whose plan has no step
// on the host (hooks, caches, a changeset), no network stack or notice,
// and whose host paths are canonical and outside the system directories
// (the root's layout then depends on nothing else).
func (lr *launchRecorder) plan(p *plan.Plan) bool {
	if lr == nil || !lr.ok {
		return false
	}
	sp := &p.Sandbox
	if p.Mode != "sandbox" || p.Backend != "native" || sp.Base.Kind != sandbox.BaseHost ||
		sp.Network != sandbox.NetworkNone || len(sp.Net.Publish) > 0 || sp.Access == sandbox.AccessChangeset ||
		len(p.Hooks) > 0 || len(p.Caches) > 0 || len(p.Secrets) > 0 || len(p.Captures) > 0 ||
		len(p.Capabilities) > 0 || p.Changeset != "" || p.Apply || p.Disk > 0 || p.TTY ||
		p.Audit.Lockfile != "none configured" {
		return false
	}
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
			if pt == "/"+d || len(pt) > len(d)+1 && pt[:len(d)+2] == "/"+d+"/" {
				return false
			}
		}
	}
	for _, path := range paths {
		if !filepath.IsAbs(path) || evalSymlinks(path) != path {
			return false
		}
		if lr.dep(native.DepAttr, path).Kind != native.DepAttr {
			return false
		}
	}
	return lr.ok
}

// write stores the record of a run whose command has just started, if
// every dependency still reads as it did before the plan was made and
// none changed too recently to tell.
func (lr *launchRecorder) write(p *plan.Plan, proc *sandbox.Process, timeoutMsg, tmpFullMsg string) {
	for _, d := range lr.deps {
		now, err := native.StatDep(d.Kind, d.Path)
		if err != nil || !now.Same(d) || lr.start.Sub(d.Changed()) < racyAge {
			return
		}
	}
	spawn, cfg, exec := proc.Sent()
	native.WriteLaunch(filepath.Join(lr.store, "launch"), &native.LaunchRecord{
		Prefix: lr.prefix, Cwd: lr.cwd, Environ: os.Environ(), Deps: lr.deps,
		Empty: []string{applyingDir(lr.store), disksDir(lr.store)},
		Spawn: spawn, Config: cfg, Exec: exec,
		AnyCommand: !p.Dispatched, Stdin: p.Interactive, Timeout: p.Timeout,
		TimeoutMsg: timeoutMsg, TmpFullMsg: tmpFullMsg,
	})
}
