package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	initp "github.com/pinfold/pinfold/internal/backend/native"
	"github.com/pinfold/pinfold/internal/changeset"
	"github.com/pinfold/pinfold/internal/config"
	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/internal/store"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/native"
)

// Launch records (see initp.LaunchRecord and initc/launch.c) let a run
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
	args, rest []string // the command line from "run", and the command after the flags
	prefix     []string // os.Args[1:] through the first "--"
	cwd        string
	store      string
	start      time.Time
	deps       []initp.Dep
	ok         bool
}

// newLaunchRecorder notes when the run started and reads the config files
// the plan will be made from, before it is made. A dependency whose ctime
// is later than the start is never recorded, so the host's own paths can
// be read once the plan shows that the run can be recorded at all (see
// plan). The config files cannot wait: a symbolic link swapped to an
// older file in between would not show in its times.
func newLaunchRecorder(args, rest []string, configFlag string) *launchRecorder {
	if _, off := os.LookupEnv(noLaunchCache); off || runtime.GOARCH != "amd64" {
		return nil
	}
	cwd, err := unix.Getwd()
	if err != nil {
		return nil
	}
	lr := &launchRecorder{args: args, rest: rest, cwd: cwd, start: time.Now(), ok: true}
	if configFlag != "" {
		lr.dep(initp.DepStat, configFlag)
		return lr
	}
	// What config.Discover sees: the directories walked (their owners
	// decide whether a file is trusted) and the files in them, up to the
	// one in effect. A walk that passed over a file is never recorded:
	// each run says why.
	d, err := config.Discover(cwd)
	if err != nil || d.Ignored != nil {
		lr.ok = false
		return lr
	}
	for _, dir := range d.Walked {
		lr.dep(initp.DepAttr, dir)
		lr.dep(initp.DepLstat, filepath.Join(dir, config.FileName))
	}
	return lr
}

// key finds the command line's prefix and the directory, as launch.c
// does, and reports whether they describe this run.
func (lr *launchRecorder) key() bool {
	if len(os.Args) < 2 || os.Args[1] != "run" || !slices.Equal(os.Args[1:], lr.args) {
		return false
	}
	// The command follows the first "--", as launch.c finds it; that "--"
	// must be where the flags ended, not the value of one (--hostname --).
	cmd := slices.Index(os.Args, "--") + 1
	if cmd <= 0 || !slices.Equal(os.Args[cmd:], lr.rest) {
		return false
	}
	var o runOptions
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs.SetInterspersed(false)
	fs.SetOutput(io.Discard)
	runFlags(&flagSet{name: "run", fs: fs}, "run", &o)
	if err := fs.Parse(os.Args[2 : cmd-1]); err != nil || fs.NArg() > 0 {
		return false
	}
	if wd, err := os.Getwd(); err != nil || evalSymlinks(wd) != lr.cwd {
		return false // resolve walked from another directory
	}
	dir, err := store.DefaultDir()
	if err != nil {
		return false
	}
	lr.prefix, lr.store = os.Args[1:cmd], dir
	return true
}

// hostDeps reads what every plan on the host base depends on.
func (lr *launchRecorder) hostDeps() {
	// The host base shows these as they are: directories (with their
	// mode), symbolic links (with their target) or nothing.
	for _, d := range sandbox.HostSystemDirs() {
		if lr.dep(initp.DepLattr, "/"+d).Stat.Mode&unix.S_IFMT == unix.S_IFLNK {
			lr.dep(initp.DepLink, "/"+d)
		}
	}
	// Where the init mounts its staging root: the first directory.
	for _, d := range []string{"/tmp", "/mnt", "/dev"} {
		if lr.dep(initp.DepLattr, d).Stat.Mode&unix.S_IFMT == unix.S_IFDIR {
			break
		}
	}
	// The binary: replaced (an upgrade) or moved (its masked path).
	lr.dep(initp.DepLink, "/proc/self/exe")
	lr.dep(initp.DepStat, "/proc/self/exe")
}

func evalSymlinks(p string) string {
	if real, err := filepath.EvalSymlinks(p); err == nil {
		return real
	}
	return p
}

// dep reads one dependency; a failure makes the run unrecordable.
func (lr *launchRecorder) dep(kind initp.DepKind, path string) initp.Dep {
	d, err := initp.StatDep(kind, path)
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
		(sp.Network != sandbox.NetworkNone && sp.Network != sandbox.NetworkAllow && sp.Network != sandbox.NetworkOutbound) ||
		len(sp.Net.Publish) > 0 ||
		len(p.Hooks) > 0 || len(p.Caches) > 0 || len(p.Secrets) > 0 || len(p.Captures) > 0 ||
		len(p.Capabilities) > 0 || p.Changeset != "" || p.Apply || p.Disk > 0 || p.TTY ||
		p.Audit.Lockfile != "none configured" {
		return false
	}
	// A replay writes the command line's command into the changeset's
	// record; the plan's must be that one.
	if sp.Access == sandbox.AccessChangeset && !slices.Equal(p.Command.Args, lr.rest) {
		return false
	}
	if !lr.key() {
		return false
	}
	lr.hostDeps()
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
		if lr.dep(initp.DepAttr, path).Kind != initp.DepAttr {
			return false
		}
	}
	return lr.ok
}

// write stores the record of a run whose command has just started, if
// every dependency still reads as it did before the plan was made and
// none changed too recently to tell.
//
// finish is the changeset's finish (the binary, the store and the id) when
// the run keeps one.
func (lr *launchRecorder) write(p *plan.Plan, proc *native.Process, timeoutMsg, tmpFullMsg string, finish []string) {
	for _, d := range lr.deps {
		now, err := initp.StatDep(d.Kind, d.Path)
		if err != nil || !now.Same(d) || lr.start.Sub(d.Changed()) < racyAge {
			return
		}
	}
	spawn, cfg, exec := proc.Sent()
	rec := &initp.LaunchRecord{
		Prefix: lr.prefix, Cwd: lr.cwd, Environ: os.Environ(), Deps: lr.deps,
		Empty: engine.PendingDirs(lr.store),
		Spawn: spawn, Config: cfg, Exec: exec,
		AnyCommand: !p.Dispatched, Stdin: p.Interactive, Timeout: p.Timeout,
		TimeoutMsg: timeoutMsg, TmpFullMsg: tmpFullMsg,
	}
	if p.Sandbox.Access == sandbox.AccessChangeset {
		if len(finish) != 3 || finish[1] != lr.store {
			return
		}
		if rec.Changeset = launchChangeset(cfg, finish[0], finish[1], finish[2], p.Command.Args); rec.Changeset == nil {
			return
		}
	}
	if p.Sandbox.Network != sandbox.NetworkNone {
		// Replayed through the shared helper only: one of its own would
		// be this process's child.
		sock, cfgMsg, ok := proc.NetShared()
		if !ok {
			return
		}
		rec.Net = &initp.LaunchNet{Sock: sock, Runs: filepath.Join(lr.store, "runs"), Config: cfgMsg}
	}
	initp.WriteLaunch(filepath.Join(lr.store, "launch"), rec)
}

// launchChangeset describes how a replay makes a changeset like the one
// this run made (id): where the id stands in the config message (only in
// paths under the store's changesets), and meta.json after its command,
// checked by rebuilding the file as launch.c will and reading it back.
// nil when anything does not match.
func launchChangeset(cfg []byte, exe, storeDir, id string, command []string) *initp.LaunchChangeset {
	if len(id) != initp.ChangesetIDLen {
		return nil
	}
	c := &initp.LaunchChangeset{Store: storeDir, Exe: exe}
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
	dir := filepath.Join(storeDir, "changesets", id)
	var st unix.Stat_t
	if unix.Lstat(filepath.Join(dir, "r0", "upper"), &st) != nil {
		return nil
	}
	c.UID, c.GID, c.UpperMode = st.Uid, st.Gid, st.Mode&0o1777
	data, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		return nil
	}
	i := bytes.Index(data, []byte(",\n  \"workspace\": "))
	if i < 0 {
		return nil
	}
	c.MetaTail = string(data[i:])
	var want, got changeset.Meta
	cmd, err := json.Marshal(command)
	if err != nil || json.Unmarshal(data, &want) != nil {
		return nil
	}
	rebuilt := `{"id": "` + id + `", "created": "2006-01-02T15:04:05.999999999Z", "command": ` + string(cmd) + c.MetaTail
	if json.Unmarshal([]byte(rebuilt), &got) != nil {
		return nil
	}
	got.Created = want.Created
	if !reflect.DeepEqual(got, want) {
		return nil
	}
	return c
}
