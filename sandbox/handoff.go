package sandbox

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// Handoffer is the optional interface of a Process that can replace the
// calling process with a small waiter for the command (the native
// runtime's): a command-line program that has nothing left to do but
// wait then releases its memory while the command runs, and exits
// quickly. Callers go through the engine, which decides whether a run may
// hand off at all.
type Handoffer interface {
	// Handoff becomes the waiter: it forwards SIGHUP, SIGINT, SIGQUIT,
	// SIGUSR1, SIGUSR2 and SIGTERM, applies Cmd.Timeout, prints o's
	// messages when those happen, and exits with the command's exit
	// status. It returns only on failure; the process is then unchanged
	// and Wait works as usual.
	Handoff(o HandoffOptions) error
}

// HandoffOptions is what the waiter needs besides the command.
type HandoffOptions struct {
	// TimeoutMsg and TmpFullMsg are printed on stderr when the timeout
	// fires or /tmp filled up.
	TimeoutMsg, TmpFullMsg string
	// MemoryMsg, OOMMsg and PidsMsg are printed on stderr when the
	// command hit its memory limit and exited (MemoryMsg) or was killed
	// (OOMMsg), and when a fork was refused for its process limit. A
	// runtime hands off a sandbox with limits only when the messages of
	// its limits are given.
	MemoryMsg, OOMMsg, PidsMsg string
	// LimitsHitFile, when set, is where the waiter writes the limits the
	// command hit (Result.LimitsHit's names, in its order, joined by
	// ", "), for a front end that records them (a session's record); no
	// file is written when none was.
	LimitsHitFile string
	// Finish names a changeset the waiter finishes once the command
	// ended, "pinfold __finish" style: the pinfold binary, the store and
	// the changeset's id. Its lock must survive the exec.
	Finish []string
	// Report is where a network stack's helper prints the summary of what
	// the policy blocked; ViolationLog is the run's log, which the helper
	// then writes ("" for none).
	Report       *os.File
	ViolationLog string
	// Record, when set, asks the runtime to record the launch first, so
	// that the next identical command line can replay it without the Go
	// runtime. The runtime records only what it can check on replay.
	Record *LaunchRecord
}

// LaunchRecord is what a replay of a launch is keyed by and depends on
// besides the sandbox's own spec, which the runtime checks itself. The
// runtime keeps the record in its store (its "launch" directory), where
// a replay makes its changeset and network log too.
type LaunchRecord struct {
	// Prefix is the command line through the first "--" (without the
	// program name); Cwd and Environ complete the key.
	Prefix  []string
	Cwd     string
	Environ []string
	// Started is when the caller began to read what the plan was made
	// from: a dependency changed later, or too soon before, is never
	// recorded.
	Started time.Time
	// Deps were read before the plan was made (its config files).
	Deps []LaunchDep
	// Empty are directories that must be empty or absent on replay
	// (pending work that only the caller does).
	Empty []string
	// AnyCommand lets a replay run any command: the plan does not depend
	// on it. Stdin passes stdin rather than /dev/null.
	AnyCommand, Stdin bool
	// MetaTail is the changeset record of the run after its command (see
	// changeset.ReplayTail), when the run keeps a changeset (Finish).
	MetaTail string
}

// LaunchCheck is how a replay checks one path of a LaunchDep.
type LaunchCheck int

// The checks of a LaunchDep.
const (
	LaunchStat  LaunchCheck = iota + 1 // stat(2), following links, is unchanged
	LaunchLstat                        // lstat(2) of the path itself is unchanged
	// LaunchAttr compares type, mode and owner only, for directories
	// whose times change without changing the plan.
	LaunchAttr
)

// LaunchDep is one path a launch record depends on, as it was read.
type LaunchDep struct {
	Check LaunchCheck
	Path  string
	// Info is what was read; nil when nothing was there.
	Info fs.FileInfo
}

// ReadLaunchDep reads path for a LaunchDep checked by c.
func ReadLaunchDep(c LaunchCheck, path string) (LaunchDep, error) {
	d := LaunchDep{Check: c, Path: path}
	var err error
	if c == LaunchLstat {
		d.Info, err = os.Lstat(path)
	} else {
		d.Info, err = os.Stat(path)
	}
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return LaunchDep{Check: c, Path: path}, nil
	}
	return d, err
}
