package cli

import (
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/internal/config"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/sandbox"
)

// Launch records (the launch cache: see sandbox.LaunchRecord and
// sandbox/native) let a run that ran before start without the Go runtime.
// The CLI only gives what the runtime cannot know: the key (the command
// line, directory, environment and ids) and the config files found
// walking up (or their absence), read before the plan is made. The engine
// decides whether the plan can be recorded; the runtime adds what the
// sandbox depends on and writes the record.

// noLaunchCache turns launch records off, for both sides.
const noLaunchCache = "PINFOLD_NO_LAUNCH_CACHE"

// launchRecorder gathers what a run's launch record depends on.
type launchRecorder struct {
	args, rest []string // the command line from "run", and the command after the flags
	prefix     []string // os.Args[1:] through the first "--"
	cwd        string
	start      time.Time
	deps       []sandbox.LaunchDep
	ok         bool
}

// newLaunchRecorder notes when the run started and reads the config files
// the plan will be made from, before it is made. A dependency whose ctime
// is later than the start is never recorded, so the runtime can read the
// host's own paths once the run is known to be recordable. The config
// files cannot wait: a symbolic link swapped to an older file in between
// would not show in its times.
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
		lr.dep(sandbox.LaunchStat, configFlag)
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
		lr.dep(sandbox.LaunchAttr, dir)
		lr.dep(sandbox.LaunchLstat, filepath.Join(dir, config.FileName))
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
	lr.prefix = os.Args[1:cmd]
	return true
}

func evalSymlinks(p string) string {
	if real, err := filepath.EvalSymlinks(p); err == nil {
		return real
	}
	return p
}

// dep reads one dependency; a failure makes the run unrecordable.
func (lr *launchRecorder) dep(c sandbox.LaunchCheck, path string) {
	d, err := sandbox.ReadLaunchDep(c, path)
	if err != nil {
		lr.ok = false
	}
	lr.deps = append(lr.deps, d)
}

// record is what the engine needs to record the launch of plan p (see
// engine.Handoff.Record), or nil when this run cannot be recorded: the
// engine and the runtime decide the rest.
func (lr *launchRecorder) record(p *plan.Plan) *sandbox.LaunchRecord {
	if lr == nil || !lr.ok {
		return nil
	}
	// A replay writes the command line's command into the changeset's
	// record; the plan's must be that one.
	if p.Sandbox.Access == sandbox.AccessChangeset && !slices.Equal(p.Command.Args, lr.rest) {
		return nil
	}
	if !lr.key() {
		return nil
	}
	return &sandbox.LaunchRecord{Prefix: lr.prefix, Cwd: lr.cwd, Environ: os.Environ(), Started: lr.start, Deps: lr.deps}
}
