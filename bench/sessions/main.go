// Command sessions measures pinfold's sessions: the latency of an exec
// into a running session against `podman exec` and `docker exec` into a
// running container and against a bare fork+exec, in paired rounds (the
// order alternates); 1,000 execs at 50 at once through the HTTP API
// (failures, p50, p99); and the host memory of an idle session.
//
//	./scripts/build.sh && go run ./bench/sessions -pinfold bin/pinfold
//
// docker needs a running daemon (DOCKER_HOST); podman and docker are
// skipped when missing. Goals: exec ≤ 0.05x of podman/docker exec, 0
// failures, ≤ 2 MiB per idle session. `pinfold exec ID -- true` takes the
// launcher's fast path (initc/fastexec.c); the same with
// PINFOLD_NO_LAUNCH_CACHE=1 is the Go side, measured beside it.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/client"
	"github.com/pinfold/pinfold/internal/agent"
	"github.com/pinfold/pinfold/internal/procstat"
	"github.com/pinfold/pinfold/internal/server"
	"github.com/pinfold/pinfold/internal/session"
	"github.com/pinfold/pinfold/sandbox"
)

func main() {
	pinfold := flag.String("pinfold", "./bin/pinfold", "pinfold binary to measure")
	rounds := flag.Int("rounds", 200, "paired rounds of exec latency")
	engines := flag.String("engines", "podman,docker", "container engines to compare with")
	execs := flag.Int("execs", 1000, "execs through the API")
	conc := flag.Int("concurrency", 50, "execs at once through the API")
	idle := flag.Int("idle", 10, "idle sessions for the memory figure")
	onlyMemory := flag.Bool("only-memory", false, "measure only the memory of idle sessions")
	flag.Parse()
	bin, err := filepath.Abs(*pinfold)
	check(err)
	tmp, err := os.MkdirTemp("", "pinfold-bench-sessions-")
	check(err)
	store, ws := filepath.Join(tmp, "store"), filepath.Join(tmp, "ws")
	check(os.MkdirAll(ws, 0o755))
	check(os.Setenv("PINFOLD_STORE", store))
	check(os.Chdir(ws))
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("load average at the start: %s", load)

	st := session.Open(store)
	// Sessions outlive this program: stopped at its end, failed or not.
	cleanup = func() {
		stopAll(bin, st)
		os.RemoveAll(tmp)
	}
	defer cleanup()
	if *onlyMemory {
		memories(bin, st, *idle)
		return
	}
	id := start(bin, "--access", "ro")

	// Commands to compare, each timed as a whole process the way a user
	// or an agent platform runs it.
	type cand struct {
		name string
		run  func() time.Duration
	}
	cands := []cand{
		{"pinfold exec SESSION true (CLI)", func() time.Duration { return timed(bin, "exec", id, "--", "true") }},
		{"session agent exec (library, one connect + fork)", func() time.Duration {
			t0 := time.Now()
			e, err := agent.Exec(context.Background(), st.Sock(id), &agent.Request{Args: []string{"true"}}, agent.ExecStreams{})
			if err != nil || e.Code != 0 {
				fail("agent exec: %v %+v", err, e)
			}
			return time.Since(t0)
		}},
		{"bare fork+exec of true", func() time.Duration {
			t0 := time.Now()
			check(exec.Command("/bin/true").Run())
			return time.Since(t0)
		}},
		{"pinfold exec, the Go side (no fast path)", func() time.Duration {
			return timedEnv([]string{"PINFOLD_NO_LAUNCH_CACHE=1"}, bin, "exec", id, "--", "true")
		}},
	}
	const firstEngine = 4 // cands from here on are the engines' execs
	for _, eng := range strings.Split(*engines, ",") {
		c, err := container(bin, eng)
		if err != nil {
			fmt.Printf("%s: skipped (%v)\n", eng, err)
			continue
		}
		defer exec.Command(eng, "rm", "-f", c).Run()
		cands = append(cands, cand{eng + " exec CONTAINER true", func() time.Duration { return timed(eng, "exec", c, "true") }})
	}
	times := make([][]time.Duration, len(cands))
	for i := range cands {
		cands[i].run() // warm
		times[i] = make([]time.Duration, *rounds)
	}
	for r := 0; r < *rounds; r++ {
		for k := range cands {
			j := k
			if r%2 == 1 {
				j = len(cands) - 1 - k
			}
			times[j][r] = cands[j].run()
		}
	}
	fmt.Printf("\nexec latency, %d paired rounds\n", *rounds)
	fmt.Printf("  %-52s %9s %9s\n", "command", "median", "p90")
	for i, c := range cands {
		fmt.Printf("  %-52s %7.2fms %7.2fms\n", c.name, ms(pct(times[i], 50)), ms(pct(times[i], 90)))
	}
	for i := firstEngine; i < len(cands); i++ {
		r := ratio(times[0], times[i])
		fmt.Printf("  pinfold exec (CLI) / %s: median of per-round ratios %.3f (p90 %.3f); goal <= 0.05: %s\n", cands[i].name, r, ratioAt(times[0], times[i], 90), met(r <= 0.05))
		fmt.Printf("  pinfold exec, the Go side / %s: %.3f\n", cands[i].name, ratio(times[3], times[i]))
		r = ratio(times[1], times[i])
		fmt.Printf("  agent exec (library) / %s: %.3f\n", cands[i].name, r)
	}
	fmt.Printf("  agent exec (library) / bare fork+exec: %.2f\n", ratio(times[1], times[2]))
	fmt.Printf("  pinfold exec (CLI) / bare fork+exec: %.2f\n", ratio(times[0], times[2]))
	fmt.Printf("  pinfold exec (CLI) / the Go side: %.3f\n", ratio(times[0], times[3]))

	apiBench(store, bin, id, *execs, *conc)
	memories(bin, st, *idle)

	load, _ = os.ReadFile("/proc/loadavg")
	fmt.Printf("\nload average at the end: %s", load)
}

// start starts a session and returns its id.
func start(bin string, args ...string) string {
	out, err := exec.Command(bin, append([]string{"session", "start"}, args...)...).Output()
	if err != nil {
		fail("session start: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func stopAll(bin string, st *session.Store) {
	l, _ := st.List("")
	for _, r := range l {
		if r.Live() {
			exec.Command(bin, "session", "stop", r.ID).Run()
		}
	}
}

// apiBench runs n execs of true, conc at once, through the HTTP API on a
// unix socket (server in this process, the Go client).
func apiBench(store, bin, id string, n, conc int) {
	sock := filepath.Join(store, "bench-api.sock")
	l, err := server.ListenUnix(sock)
	check(err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go server.Serve(ctx, server.New(server.Config{Store: store, Pinfold: bin}), []net.Listener{l}...)
	c, err := client.New("unix://" + sock)
	check(err)
	lat := make([]time.Duration, n)
	var failures int
	var mu sync.Mutex
	var firstErr string
	next := make(chan int)
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				s := time.Now()
				res, err := c.Exec(context.Background(), id, client.ExecRequest{Args: []string{"true"}})
				lat[i] = time.Since(s)
				if err != nil || res.ExitCode != 0 {
					mu.Lock()
					failures++
					if firstErr == "" {
						firstErr = fmt.Sprint(err, res)
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	wall := time.Since(t0)
	fmt.Printf("\n%d execs of true through the API (unix socket, Go client), %d at once\n", n, conc)
	fmt.Printf("  failures %d; p50 %.2fms, p99 %.2fms, max %.2fms; %.0f execs/s\n", failures,
		ms(pct(lat, 50)), ms(pct(lat, 99)), ms(pct(lat, 100)), float64(n)/wall.Seconds())
	if firstErr != "" {
		fmt.Printf("  first failure: %s\n", firstErr)
	}
}

// memories measures idle sessions --access ro, with a changeset, and
// (as root, where limits need no delegation) --access ro with limits.
func memories(bin string, st *session.Store, n int) {
	memory(bin, st, n, "--access", "ro")
	memory(bin, st, n) // the default: a changeset
	if os.Geteuid() == 0 {
		memory(bin, st, n, "--access", "ro", "--memory", "256m", "--pids", "64")
	}
}

// memory starts n idle sessions with args and reports what each costs
// the host: the proportional set size (PSS) of its supervisor (the native
// runtime's waiter it hands off to, or pinfold), sandbox init and agent,
// read from /proc/PID/smaps_rollup.
func memory(bin string, st *session.Store, n int, args ...string) {
	var ids []string
	for i := 0; i < n; i++ {
		ids = append(ids, start(bin, args...))
	}
	defer func() {
		for _, id := range ids {
			exec.Command(bin, "session", "stop", id).Run()
		}
	}()
	time.Sleep(2 * time.Second) // let them settle
	var sup, sbx, anon []int64
	for _, id := range ids {
		r, err := st.Get(id, "")
		if err != nil {
			fail("%v", err)
		}
		procs := procstat.Descendants(r.Pid)
		var s, b, a int64
		for i, p := range procs {
			m, _ := procstat.MemoryOf(p)
			total, private := m.Pss, m.PssAnon
			a += private
			if i == 0 {
				s += total
			} else {
				b += total
			}
		}
		sup, sbx, anon = append(sup, s), append(sbx, b), append(anon, a)
	}
	avg := func(v []int64) float64 {
		var t int64
		for _, x := range v {
			t += x
		}
		return float64(t) / float64(len(v)) / 1024
	}
	mode := strings.Join(args, " ")
	if mode == "" {
		mode = "a changeset"
	}
	fmt.Printf("\nhost memory per idle session (%d sessions, %s, PSS from /proc/PID/smaps_rollup)\n", n, mode)
	fmt.Printf("  supervisor (the waiter, or pinfold):          %.2f MiB\n", avg(sup))
	fmt.Printf("  sandbox (its init and the agent):             %.2f MiB\n", avg(sbx))
	t := avg(sup) + avg(sbx)
	fmt.Printf("  total %.2f MiB; goal <= 2 MiB: %s\n", t, met(t <= 2))
	fmt.Printf("  of which its own (anonymous) memory %.2f MiB; the rest is its share of pinfold's binary, mapped by every agent\n", avg(anon))
}

// container starts a long-running container of pinfold's skeleton image
// with the host's system directories, as pinfold's own container runs do.
func container(bin, eng string) (string, error) {
	if _, err := exec.LookPath(eng); err != nil {
		return "", err
	}
	if out, err := exec.Command(bin, "run", "--backend", eng, "--access", "ro", "--", "true").CombinedOutput(); err != nil {
		return "", fmt.Errorf("pinfold run --backend %s: %v: %s", eng, err, out)
	}
	out, err := exec.Command(eng, "images", "--format", "{{.Repository}}:{{.Tag}}").Output()
	if err != nil {
		return "", err
	}
	img := ""
	for _, l := range strings.Fields(string(out)) {
		if strings.Contains(l, "pinfold-skeleton:") {
			img = l
			break
		}
	}
	if img == "" {
		return "", fmt.Errorf("no pinfold skeleton image in %s", eng)
	}
	// Limits this host's engines accept (a nested container here refuses
	// higher ones).
	nofile := uint64(20000)
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil && lim.Max < nofile {
		nofile = lim.Max
	}
	args := []string{"run", "-d", "--rm", "--network", "none", "--read-only", "--cap-drop", "ALL",
		"--security-opt", "no-new-privileges", "--tmpfs", "/tmp:rw,size=1073741824,mode=1777",
		"--ulimit", fmt.Sprintf("nofile=%d:%d", nofile, nofile), "--ulimit", "nproc=1000:1000"}
	if eng == "podman" {
		if runc, err := exec.LookPath("runc"); err == nil {
			args = append(args, "--runtime", runc)
		}
	}
	for _, d := range sandbox.HostSystemDirs() {
		// Links (/lib64 -> usr/lib64) are bound as the directories they name.
		if fi, err := os.Stat("/" + d); err == nil && fi.IsDir() {
			args = append(args, "-v", "/"+d+":/"+d+":ro")
		}
	}
	out, err = exec.Command(eng, append(args, img, "sleep", "100000")...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s run -d: %v: %s", eng, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

func timed(name string, args ...string) time.Duration { return timedEnv(nil, name, args...) }

// timedEnv times name with extra environment variables.
func timedEnv(env []string, name string, args ...string) time.Duration {
	cmd := exec.Command(name, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		fail("%s %v: %v: %s", name, args, err, out.String())
	}
	return time.Since(t0)
}

func ratio(a, b []time.Duration) float64 { return ratioAt(a, b, 50) }

// ratioAt is the p-th percentile of the per-round ratios a/b.
func ratioAt(a, b []time.Duration, p int) float64 {
	r := make([]float64, len(a))
	for i := range a {
		r[i] = float64(a[i]) / float64(b[i])
	}
	sort.Float64s(r)
	return r[min(len(r)*p/100, len(r)-1)]
}

func pct(d []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := len(s) * p / 100
	if i >= len(s) {
		i = len(s) - 1
	}
	return s[i]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

func check(err error) {
	if err != nil {
		fail("%v", err)
	}
}

// cleanup stops the benchmark's sessions; fail runs it before exiting.
var cleanup = func() {}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", a...)
	cleanup()
	os.Exit(1)
}
