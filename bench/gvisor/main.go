// Command gvisor measures the start of a gVisor sandbox: pinfold run
// --backend gvisor against runsc do itself (the floor: the same runsc
// with no bundle of pinfold's making) and against pinfold's native
// sandbox, in one run. Runs are paired: each round runs every command
// once, in rotating order, and a ratio is the median of the per-round
// ratios. It runs as root (the gvisor backend does).
//
//	go run ./bench/gvisor -pinfold /usr/local/bin/pinfold -runsc /var/cache/pinfold-tools/runsc -rounds 50
//
// -exec times pinfold exec in a running gVisor session against one in a
// native session; -build DIR:PKG a cold go build under both.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"
)

type runner struct {
	name, command string
	run           func() error
	d             []time.Duration
}

func command(dir string, env []string, name string, args ...string) *runner {
	r := &runner{command: name + " " + strings.Join(args, " ")}
	r.run = func() error {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %v: %s", r.command, err, out.String())
		}
		return nil
	}
	return r
}

func main() {
	pinfold := flag.String("pinfold", "pinfold", "the pinfold binary")
	runsc := flag.String("runsc", "/var/cache/pinfold-tools/runsc", "the runsc binary")
	rounds := flag.Int("rounds", 50, "paired rounds")
	build := flag.String("build", "", "DIR:PKG: time a cold go build of PKG in module DIR instead")
	sessions := flag.Bool("exec", false, "time pinfold exec -- true in a gvisor session against a native one instead")
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "run as root: the gvisor backend runs as root only")
		os.Exit(1)
	}
	ws, err := os.MkdirTemp("", "pinfold-bench-gvisor-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer os.RemoveAll(ws)
	state, _ := os.MkdirTemp("", "pinfold-bench-runsc-")
	defer os.RemoveAll(state)
	store, _ := os.MkdirTemp("", "pinfold-bench-store-")
	defer os.RemoveAll(store)
	env := []string{"PINFOLD_RUNSC=" + *runsc, "PINFOLD_STORE=" + store}
	if *build != "" {
		dir, pkg, _ := strings.Cut(*build, ":")
		modcache := strings.TrimSpace(output("go", "env", "GOMODCACHE"))
		goroot := strings.TrimSpace(output("go", "env", "GOROOT"))
		args := func(backend string) []string {
			return []string{"run", "--backend", backend, "--access", "ro", "--mount", modcache + ":" + modcache + ":ro",
				"--env", "GOCACHE=/tmp/gocache", "--env", "GOMODCACHE=" + modcache, "--env", "GOTOOLCHAIN=local",
				"--env", "GOFLAGS=-mod=readonly", "--env", "PATH=" + goroot + "/bin:/usr/bin:/bin", "--", "go", "build", pkg}
		}
		gv := command(dir, env, *pinfold, args("gvisor")...)
		gv.name = "go build under gvisor"
		nat := command(dir, env, *pinfold, args("native")...)
		nat.name = "go build under native"
		rs := []*runner{gv, nat}
		rounds := measure(rs, *rounds)
		report(rs, rounds)
		fmt.Printf("gvisor / native: %.2fx\n", ratio(gv, nat))
		return
	}
	if *sessions {
		var rs []*runner
		for _, backend := range []string{"gvisor", "native"} {
			name := "bench-" + backend + "-" + fmt.Sprint(os.Getpid())
			start := command(ws, env, *pinfold, "session", "start", "--backend", backend, "--access", "rw", "--name", name)
			if err := start.run(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			defer command(ws, env, *pinfold, "session", "stop", name).run()
			r := command(ws, env, *pinfold, "exec", name, "--", "true")
			r.name = "exec in a " + backend + " session"
			rs = append(rs, r)
		}
		measure(rs, *rounds)
		report(rs, *rounds)
		fmt.Printf("gvisor session exec / native session exec: %.2fx\n", ratio(rs[0], rs[1]))
		return
	}
	do := command(ws, env, *runsc, "--root", state, "--network=none", "--platform=systrap", "do", "true")
	do.name = "runsc do"
	gv := command(ws, env, *pinfold, "run", "--backend", "gvisor", "--", "true")
	gv.name = "pinfold gvisor"
	gvro := command(ws, env, *pinfold, "run", "--backend", "gvisor", "--access", "ro", "--", "true")
	gvro.name = "pinfold gvisor, --access ro"
	nat := command(ws, env, *pinfold, "run", "--backend", "native", "--", "true")
	nat.name = "pinfold native"
	rs := []*runner{do, gv, gvro, nat}
	measure(rs, *rounds)
	report(rs, *rounds)
	fmt.Printf("pinfold gvisor / runsc do:           %.2fx\n", ratio(gv, do))
	fmt.Printf("pinfold gvisor --access ro / runsc do: %.2fx\n", ratio(gvro, do))
	fmt.Printf("pinfold gvisor / pinfold native:     %.2fx\n", ratio(gv, nat))
}

// measure warms every runner up once, then runs rounds in rotating order.
func measure(rs []*runner, rounds int) int {
	for _, r := range rs { // warm up: the first runs page the binaries in
		if err := r.run(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	for i := range rounds {
		for j := range rs {
			r := rs[(i+j)%len(rs)]
			start := time.Now()
			if err := r.run(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			r.d = append(r.d, time.Since(start))
		}
	}
	return rounds
}

func report(rs []*runner, rounds int) {
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("rounds %d, load %s, %s\n", rounds, strings.Join(strings.Fields(string(load))[:3], " "), time.Now().UTC().Format(time.RFC3339))
	for _, r := range rs {
		fmt.Printf("%-28s median %9.1f ms  p90 %9.1f ms  (%s)\n", r.name, ms(median(r.d)), ms(pct(r.d, 0.9)), r.command)
	}
}

func output(name string, args ...string) string {
	b, err := exec.Command(name, args...).Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, name, err)
		os.Exit(1)
	}
	return string(b)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func median(d []time.Duration) time.Duration { return pct(d, 0.5) }

func pct(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(p*float64(len(s)-1))]
}

// ratio is the median of the per-round ratios of a to b.
func ratio(a, b *runner) float64 {
	rs := make([]float64, len(a.d))
	for i := range a.d {
		rs[i] = float64(a.d[i]) / float64(b.d[i])
	}
	sort.Float64s(rs)
	return rs[len(rs)/2]
}
