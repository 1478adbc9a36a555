package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pinfold/pinfold/internal/cgroup"
	"github.com/pinfold/pinfold/internal/procstat"
)

// benchLimits are the limits of the -limits comparison.
var benchLimits = cgroup.Limits{MemoryBytes: 256 << 20, Pids: 64}

// limitsArgs is the measured command line.
var limitsArgs = []string{"run", "--access", "ro", "--memory", "256m", "--pids", "64", "--", "/bin/true"}

// limitsRunners are pinfold run --access ro with --memory 256m --pids 64,
// its peer, bwrap in the same cgroups made, limited, joined and removed by
// a shell script (one sh, the way a script around bwrap would: it waits
// for bwrap, then removes the groups, retrying while they are busy), and plain
// bwrap. The cgroups go where pinfold puts its own: a probe group tells
// the hierarchies and their files (v1 or v2).
func limitsRunners(bin string) ([]*runner, error) {
	sys, err := cgroup.Detect()
	if err != nil {
		return nil, err
	}
	probe, err := sys.New(fmt.Sprintf("%d-%d-probe", os.Getpid(), procstat.StartTime(os.Getpid())), benchLimits)
	if err != nil {
		return nil, err
	}
	var parents []string
	var set []string // lines of the script writing the limits into $g
	for _, d := range probe.Dirs() {
		parent := filepath.Dir(d)
		parents = append(parents, parent)
		for _, f := range []struct{ file, v string }{
			{"memory.max", "268435456"}, {"memory.swap.max", "0"},
			{"memory.limit_in_bytes", "268435456"}, {"memory.memsw.limit_in_bytes", "268435456"},
			{"pids.max", "64"},
		} {
			if _, err := os.Stat(filepath.Join(d, f.file)); err == nil {
				set = append(set, fmt.Sprintf("echo %s > %s/$n/%s", f.v, parent, f.file))
			}
		}
	}
	probe.Remove()
	var sb strings.Builder
	// Named as pinfold names its groups (PID-START-...), after this
	// process: pinfold clean leaves them while it runs, and removes what
	// an interrupted bench left.
	fmt.Fprintf(&sb, "set -e\nn=%d-%d-bench$$\n", os.Getpid(), procstat.StartTime(os.Getpid()))
	sb.WriteString("mkdir")
	for _, p := range parents {
		fmt.Fprintf(&sb, " %s/$n", p)
	}
	sb.WriteString("\n")
	sb.WriteString(strings.Join(set, "\n") + "\n(")
	for _, p := range parents {
		fmt.Fprintf(&sb, "echo 0 > %s/$n/cgroup.procs; ", p)
	}
	sb.WriteString("exec bwrap")
	for _, a := range bwrapArgs {
		sb.WriteString(" " + a)
	}
	sb.WriteString(")\n")
	// A group is busy for a moment after its last process exited.
	for _, p := range parents {
		fmt.Fprintf(&sb, "i=0; until rmdir %s/$n 2>/dev/null; do i=$((i+1)); [ $i -lt 100000 ]; done\n", p)
	}
	script := sb.String()
	return []*runner{
		{name: "pinfold run --access ro --memory 256m --pids 64", run: command(bin, limitsArgs...)},
		{name: "script (cgroups, bwrap, rmdir)", run: command("sh", "-c", script)},
		{name: "bwrap (same isolation) /bin/true", run: command("bwrap", bwrapArgs...)},
	}, nil
}
