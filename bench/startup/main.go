// Command startup measures how fast pinfold starts a sandbox, against
// bubblewrap with the same isolation, podman, and plain /bin/true, in one
// run. Runs are paired: each round runs every command once, in rotating
// order, so that both sides of a ratio see the same machine state; the
// reported ratio is the median of the per-round ratios. A command line's
// first run (no launch record: the Go side) is measured on its own row.
//
//	go run ./bench/startup -pinfold ./pinfold -rounds 300
//
// With -limits it pairs a run with --memory 256m --pids 64 against bwrap
// in the same cgroups made by a shell script (limitsRunners).
//
// It also measures the library path: a warm Go process calling
// sandbox.Run for /bin/true with a pool of pre-built instances, paired
// with the same bubblewrap command.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	initp "github.com/pinfold/pinfold/internal/backend/native"
	"github.com/pinfold/pinfold/internal/store"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/native"
)

// bwrapArgs is bubblewrap with the isolation pinfold gives by default:
// user, pid, ipc, uts and network namespaces, a read-only root, /proc,
// /dev and a tmpfs /tmp.
var bwrapArgs = []string{"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net",
	"--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "/bin/true"}

type runner struct {
	name string
	run  func() error
	d    []time.Duration
}

func command(name string, args ...string) func() error {
	return commandEnv(nil, name, args...)
}

// commandEnv runs name with extra environment variables.
func commandEnv(env []string, name string, args ...string) func() error {
	return func() error {
		cmd := exec.Command(name, args...)
		if env != nil {
			cmd.Env = append(os.Environ(), env...)
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s %v: %v: %s", name, args, err, out.String())
		}
		return nil
	}
}

// commandFirst runs name as a first run: a fresh variable in the
// environment each time makes a command line no launch record has seen
// (the environment is in the record's key), so the Go side runs and
// records it, as the first run of a command line in a directory does.
func commandFirst(name string, args ...string) func() error {
	n := 0
	return func() error {
		n++
		return commandEnv([]string{fmt.Sprintf("PINFOLD_BENCH_FIRST=%d-%d", os.Getpid(), n)}, name, args...)()
	}
}

func main() {
	pinfold := flag.String("pinfold", "./pinfold", "pinfold binary to measure")
	rounds := flag.Int("rounds", 200, "paired rounds per comparison")
	podman := flag.Bool("podman", true, "include podman (slow) in the CLI table")
	library := flag.Bool("library", true, "measure the library path")
	limits := flag.Bool("limits", false, "measure only a run with --memory 256m --pids 64 against bwrap in a cgroup a script made")
	flag.Parse()
	bin, err := filepath.Abs(*pinfold)
	if err != nil {
		fail(err)
	}
	// A workspace of our own: pinfold mounts the current directory.
	ws, err := os.MkdirTemp("", "pinfold-bench-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(ws)
	if err := os.Chdir(ws); err != nil {
		fail(err)
	}

	if *limits {
		load, _ := os.ReadFile("/proc/loadavg")
		fmt.Printf("load average at the start: %s", load)
		rs, err := limitsRunners(bin)
		if err != nil {
			fail(err)
		}
		// A launch record holds nothing younger than two seconds (the
		// workspace was just made): the warm-up records the run once it
		// is older, so that every measured run is a replay.
		time.Sleep(2100 * time.Millisecond)
		measure(rs[:1], 0)
		begin := time.Now()
		measure(rs, *rounds)
		report("CLI with limits, cold start", rs, 0, 1)
		fmt.Printf("  pinfold's runs were replays from a launch record: %s\n", replays(begin, limitsArgs))
		ratio(rs, 0, 2)
		ratio(rs, 1, 2)
		load, _ = os.ReadFile("/proc/loadavg")
		fmt.Printf("load average at the end: %s", load)
		return
	}

	// bwrap shows the workspace read-only (its / is): pinfold --access ro
	// is the same isolation; the default keeps writes in a changeset,
	// which bwrap cannot do.
	cli := []*runner{
		{name: "pinfold run --access ro -- /bin/true", run: command(bin, "run", "--access", "ro", "--", "/bin/true")},
		{name: "bwrap (same isolation) /bin/true", run: command("bwrap", bwrapArgs...)},
		{name: "pinfold run -- /bin/true (changeset)", run: command(bin, "run", "--", "/bin/true")},
		{name: "/bin/true", run: command("/bin/true")},
		// Without launch records every run starts the Go runtime.
		{name: "pinfold run --access ro (no launch cache)", run: commandEnv([]string{"PINFOLD_NO_LAUNCH_CACHE=1"},
			bin, "run", "--access", "ro", "--", "/bin/true")},
		{name: "pinfold run --access ro (first run)", run: commandFirst(bin, "run", "--access", "ro", "--", "/bin/true")},
		// A control: bwrap against itself shows what the per-round
		// ratios' spread is under the machine's load, for any peer.
		{name: "bwrap again (control)", run: command("bwrap", bwrapArgs...)},
	}
	if *podman {
		if p, err := podmanRunner(ws); err != nil {
			fmt.Fprintf(os.Stderr, "podman skipped: %v\n", err)
		} else {
			cli = append(cli, p)
		}
	}
	measure(cli, *rounds)
	report("CLI, cold start", cli, 0, 1)
	ratio(cli, 2, 1)
	ratio(cli, 4, 1)
	ratio(cli, 5, 1)
	ratio(cli, 5, 0)
	ratio(cli, 6, 1)

	if *library {
		lib, cleanup, err := libraryRunner(ws)
		if err != nil {
			fail(err)
		}
		pair := []*runner{lib, {name: "bwrap (same isolation) /bin/true", run: command("bwrap", bwrapArgs...)}}
		measure(pair, *rounds)
		cleanup()
		report("library, warm process with a pool", pair, 0, 1)
	}
}

// replays tells whether the runs of args since begin were replayed: a run
// that took the Go side writes its launch record again.
func replays(begin time.Time, args []string) string {
	dir, err := store.DefaultDir()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	cwd, _ := os.Getwd()
	prefix := args[:slices.Index(args, "--")+1]
	key, err := initp.LaunchKey(prefix, cwd, os.Environ())
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	fi, err := os.Stat(initp.LaunchFile(filepath.Join(dir, "launch"), key))
	switch {
	case err != nil:
		return "no (no launch record)"
	case fi.ModTime().After(begin):
		return "no (its record was written during the measurement)"
	}
	return "yes"
}

// podmanRunner runs /bin/true with podman in a minimal root filesystem
// made of /bin/true and its libraries.
func podmanRunner(ws string) (*runner, error) {
	if _, err := exec.LookPath("podman"); err != nil {
		return nil, err
	}
	root := filepath.Join(ws, "podman-root")
	for _, f := range []string{"/bin/true", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"} {
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			return nil, err
		}
		dst := filepath.Join(root, f)
		os.MkdirAll(filepath.Dir(dst), 0o755)
		b, err := os.ReadFile(real)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			return nil, err
		}
	}
	// This machine's rlimits are above what podman's OCI runtime accepts.
	r := &runner{name: "podman run --network none /bin/true", run: command("podman", "run", "--rm", "--network", "none",
		"--ulimit", "nofile=20000:20000", "--ulimit", "nproc=1000:1000", "--rootfs", root, "/bin/true")}
	return r, r.run()
}

// libraryRunner times sandbox.Run + Wait of /bin/true in this process.
func libraryRunner(ws string) (*runner, func(), error) {
	ctx := context.Background()
	sb, err := native.New(ctx, sandbox.Spec{Workspace: ws}, native.WithPool(2))
	if err != nil {
		return nil, nil, err
	}
	r := &runner{name: "sandbox.Run /bin/true (pool of 2)", run: func() error {
		p, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"/bin/true"}})
		if err != nil {
			return err
		}
		res, err := p.Wait()
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit status %d", res.ExitCode)
		}
		return err
	}}
	return r, func() { sb.Close() }, nil
}

// measure runs every runner once per round, rotating who goes first.
func measure(rs []*runner, rounds int) {
	for _, r := range rs { // warm up caches and pools
		for i := 0; i < 10; i++ {
			err := r.run()
			for try := 0; err != nil && vanished(err) && try < 10; try++ {
				err = r.run()
			}
			if err != nil {
				fail(err)
			}
		}
	}
	for i := 0; i < rounds; i++ {
		for j := range rs {
			r := rs[(i+j)%len(rs)]
			start := time.Now()
			err := r.run()
			for try := 0; err != nil && vanished(err) && try < 10; try++ {
				start = time.Now()
				err = r.run()
			}
			if err != nil {
				fail(err)
			}
			r.d = append(r.d, time.Since(start))
		}
	}
}

// vanished reports bwrap's failure to copy a mount that went away while
// it bound / recursively (another program's short-lived mount, on a
// shared machine: a container's overlay unmounted while bwrap remounted
// it gives EINVAL): that round of bwrap is timed again.
func vanished(err error) bool {
	e := err.Error()
	return strings.Contains(e, "Can't bind mount /oldroot/") &&
		(strings.Contains(e, "No such file or directory") || strings.Contains(e, "remount") && strings.Contains(e, "Invalid argument"))
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(float64(len(s)-1)*p)]
}

// report prints each runner's median and the median of the per-round
// ratios of runner a to runner b.
func report(title string, rs []*runner, a, b int) {
	fmt.Printf("\n%s (%d rounds)\n", title, len(rs[0].d))
	fmt.Printf("  %-44s %10s %10s %10s\n", "command", "median", "p10", "p90")
	for _, r := range rs {
		fmt.Printf("  %-44s %8.2fms %8.2fms %8.2fms\n", r.name, ms(median(r.d)), ms(percentile(r.d, 0.1)), ms(percentile(r.d, 0.9)))
	}
	ratio(rs, a, b)
}

// ratio prints the median of the per-round ratios of runner a to b, their
// p25, p75 and p90, and the ratio of the two runners' own p90s (the tail
// latency of each, which the per-round p90 is not: that one is the worst
// tenth of the rounds' ratios, each round's two runs drawn apart).
func ratio(rs []*runner, a, b int) {
	ratios := make([]float64, len(rs[a].d))
	for i := range ratios {
		ratios[i] = float64(rs[a].d[i]) / float64(rs[b].d[i])
	}
	sort.Float64s(ratios)
	fmt.Printf("  ratio %s / %s: median %.3f (p25 %.3f, p75 %.3f, p90 %.3f; p90 / p90 %.3f)\n", rs[a].name, short(rs[b].name),
		ratios[len(ratios)/2], ratios[len(ratios)/4], ratios[3*len(ratios)/4], ratios[int(float64(len(ratios)-1)*0.9)],
		float64(percentile(rs[a].d, 0.9))/float64(percentile(rs[b].d, 0.9)))
}

func short(s string) string { return strings.Fields(s)[0] }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "startup:", err)
	os.Exit(1)
}
