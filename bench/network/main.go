// Command network measures pinfold's userspace network stack against the
// user-mode networks of slirp4netns and pasta, in one run:
//
//   - TCP throughput between a client inside and servers on the host's
//     loopback, both ways: pinfold's library with NetworkOutbound and
//     HostLoopback, slirp4netns and pasta, each reaching the host's
//     127.0.0.1 as 10.0.2.2;
//   - the latency pinfold's stack adds to a connect and a 1-byte echo,
//     against the same client with the host's network;
//   - what --network allow adds to the CLI's cold start.
//
// Rounds are paired: each round runs every side once, in rotating order,
// so that both sides of a ratio see the same machine state; the reported
// ratio is the median of the per-round ratios.
//
//	go run ./bench/network -pinfold bin/pinfold
//
// Only the loopback is used: the servers listen on 127.0.0.1, in this
// process, which also runs pinfold's stack (the library's). The client
// (./client) times each transfer itself, from connect to the last byte,
// so no tool's start-up is counted. -v prints every measurement;
// -cpuprofile FILE profiles this process, pinfold's stack included.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/internal/netstack"
	"github.com/pinfold/pinfold/internal/procstat"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/native"
)

// logEach prints every measurement as it is made (-v).
var logEach bool

// peerMTU is the MTU the peers configure (-peer-mtu).
var peerMTU int

// hostAddr is the host's loopback as every tool shows it inside.
const hostAddr = "10.0.2.2"

// clientResult is what the client prints (see client/main.go).
type clientResult struct {
	Bytes int64   `json:"bytes"`
	Nanos int64   `json:"nanos"`
	RTTs  []int64 `json:"rtts"`
	Err   string  `json:"err"`
}

// tool runs the client with args in one kind of sandbox; host is where
// the host's loopback is inside.
type tool struct {
	name   string
	host   string
	run    func(args []string) (*clientResult, error)
	failed []string // errors of attempts that were retried
}

// try runs the client, retrying twice after a failure: the peers drop a
// connection now and then. Failures are reported with the results.
func (t *tool) try(args []string) *clientResult {
	for i := 0; ; i++ {
		r, err := t.run(args)
		if err == nil {
			return r
		}
		if i == 2 {
			fail(err)
		}
		t.failed = append(t.failed, err.Error())
		if logEach {
			fmt.Fprintf(os.Stderr, "retrying: %v\n", err)
		}
	}
}

// failures prints the retried failures of tools, and forgets them.
func failures(tools []*tool) {
	for _, t := range tools {
		if len(t.failed) > 0 {
			fmt.Printf("  %s: %d failed attempt(s) retried, first: %s\n", t.name, len(t.failed), t.failed[0])
			t.failed = nil
		}
	}
}

func main() {
	pinfold := flag.String("pinfold", "./pinfold", "pinfold binary to measure (CLI start-up)")
	mib := flag.Int64("mib", 256, "MiB per transfer")
	rounds := flag.Int("rounds", 5, "paired rounds of transfers")
	connects := flag.Int("connects", 200, "connects per sandbox run in the latency test")
	latRounds := flag.Int("latency-rounds", 5, "paired sandbox runs in the latency test")
	startRounds := flag.Int("startup-rounds", 100, "paired rounds of CLI start-up")
	peers := flag.Bool("peers", true, "measure slirp4netns and pasta too")
	flag.IntVar(&peerMTU, "peer-mtu", 65520, "MTU of slirp4netns's and pasta's interface (pinfold's is 65520)")
	only := flag.String("only", "", "run one part only: throughput, latency, startup or memory")
	memSandboxes := flag.String("memory-sandboxes", "1,10", "how many sandboxes attach to the shared helper at once in the memory part (a comma-separated list)")
	memRounds := flag.Int("memory-rounds", 10, "paired runs timing the first connect after the idle helper released its memory")
	direction := flag.String("direction", "", "throughput one way only: up or down")
	verbose := flag.Bool("v", false, "print every transfer and run")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of this process (pinfold's stack runs in it) to FILE")
	flag.Parse()
	// The library's network stack runs in pinfold's helper, built beside
	// the binary (scripts/build.sh).
	if os.Getenv("PINFOLD_NET_HELPER") == "" {
		if abs, err := filepath.Abs(*pinfold); err == nil {
			os.Setenv("PINFOLD_NET_HELPER", filepath.Join(filepath.Dir(abs), "pinfold-net"))
		}
	}
	logEach = *verbose
	bin, err := filepath.Abs(*pinfold)
	check(err)

	dir, err := os.MkdirTemp("", "pinfold-netbench-")
	check(err)
	tempDirs = append(tempDirs, dir)
	defer os.RemoveAll(dir)
	check(os.Chmod(dir, 0o755))
	client := filepath.Join(dir, "client")
	build := exec.Command("go", "build", "-o", client, "github.com/pinfold/pinfold/bench/network/client")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fail(fmt.Errorf("building the client: %v\n%s", err, out))
	}
	srv, err := startServers()
	check(err)

	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		check(err)
		check(pprof.StartCPUProfile(f))
		defer pprof.StopCPUProfile()
	}

	fmt.Printf("load average at the start: %s\n", loadavg())
	defer func() { fmt.Printf("\nload average at the end: %s\n", loadavg()) }()
	pf := pinfoldTool(dir, sandbox.NetworkOutbound)
	tools := []*tool{pf}
	if *peers {
		for _, t := range []*tool{slirpTool(client), pastaTool(client)} {
			// A first short transfer checks the tool works here.
			var err error
			for range 3 {
				if _, err = t.run([]string{"up", srv.sink(t.host), "1048576"}); err == nil {
					break
				}
			}
			if err != nil {
				fmt.Printf("%s skipped: %v\n", t.name, err)
				continue
			}
			tools = append(tools, t)
		}
	}

	if *only == "" || *only == "throughput" {
		throughput(tools, srv, *mib<<20, *rounds, *direction)
	}
	if *only == "" || *only == "latency" {
		latency(append([]*tool{pf, pinfoldTool(dir, sandbox.NetworkHost)}, tools[1:]...), srv, *connects, *latRounds)
	}
	if *only == "" || *only == "startup" {
		startup(bin, *startRounds)
	}
	if *only == "" || *only == "memory" {
		var ks []int
		for _, f := range strings.Split(*memSandboxes, ",") {
			k, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || k < 1 {
				fail(fmt.Errorf("-memory-sandboxes: %q is not a count", f))
			}
			ks = append(ks, k)
		}
		memory(dir, srv, ks, *memRounds)
	}
}

// servers listen on the host's loopback: a sink that reads a count and
// that many bytes and answers with the number it read, a source that
// reads a count and sends that many bytes, and a 1-byte echo.
type servers struct {
	sinkPort, sourcePort, echoPort int
}

func (s *servers) sink(host string) string { return net.JoinHostPort(host, strconv.Itoa(s.sinkPort)) }
func (s *servers) source(host string) string {
	return net.JoinHostPort(host, strconv.Itoa(s.sourcePort))
}
func (s *servers) echo(host string) string { return net.JoinHostPort(host, strconv.Itoa(s.echoPort)) }

func startServers() (*servers, error) {
	var s servers
	for _, x := range []struct {
		port  *int
		serve func(net.Conn)
	}{{&s.sinkPort, serveSink}, {&s.sourcePort, serveSource}, {&s.echoPort, serveEcho}} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		*x.port = l.Addr().(*net.TCPAddr).Port
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					c.SetDeadline(time.Now().Add(5 * time.Minute))
					x.serve(c)
				}()
			}
		}()
	}
	return &s, nil
}

func serveSink(c net.Conn) {
	var n int64
	if binary.Read(c, binary.BigEndian, &n) != nil {
		return
	}
	buf := make([]byte, 1<<20)
	got := int64(0)
	for got < n {
		k, err := c.Read(buf[:min(n-got, int64(len(buf)))])
		got += int64(k)
		if err != nil {
			break
		}
	}
	fmt.Fprintf(c, "%d\n", got)
}

func serveSource(c net.Conn) {
	var n int64
	if binary.Read(c, binary.BigEndian, &n) != nil {
		return
	}
	buf := make([]byte, 1<<20)
	for left := n; left > 0; {
		k, err := c.Write(buf[:min(left, int64(len(buf)))])
		if err != nil {
			return
		}
		left -= int64(k)
	}
	// The client closes when it has read everything (or, holding the
	// connection open, when it is told to end).
	io.Copy(io.Discard, c)
}

func serveEcho(c net.Conn) {
	b := make([]byte, 1)
	for {
		if _, err := c.Read(b); err != nil {
			return
		}
		if _, err := c.Write(b); err != nil {
			return
		}
	}
}

// pinfoldTool runs the client with pinfold's library: NetworkOutbound
// with the host's loopback at 10.0.2.2, or the host's network.
func pinfoldTool(dir string, network sandbox.Network) *tool {
	spec := sandbox.Spec{Network: network, Mounts: []sandbox.Mount{{Source: dir, Target: "/pinfold-bench", ReadOnly: true}}}
	t := &tool{name: "pinfold (outbound, host loopback)", host: hostAddr}
	if network == sandbox.NetworkOutbound {
		spec.Net.HostLoopback = true
	} else {
		t.name, t.host = "pinfold (host network)", "127.0.0.1"
	}
	t.run = func(args []string) (*clientResult, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		var out, errb bytes.Buffer
		res, err := native.Run(ctx, spec, &sandbox.Cmd{Args: append([]string{"/pinfold-bench/client"}, args...),
			Stdout: &out, Stderr: &errb, Timeout: 4 * time.Minute})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit status %d", res.ExitCode)
		}
		return parse(t.name, args, out.Bytes(), errb.Bytes(), err)
	}
	return t
}

// slirpTool runs the client in a new user and network namespace that
// slirp4netns connects (its 10.0.2.2 is the host's loopback unless
// --disable-host-loopback). A shell waits in the namespace until
// slirp4netns has configured tap0, then becomes the client.
func slirpTool(client string) *tool {
	t := &tool{name: "slirp4netns", host: hostAddr}
	if out, err := exec.Command("slirp4netns", "--version").Output(); err == nil {
		t.name = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	}
	t.run = func(args []string) (*clientResult, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		goR, goW, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		defer goW.Close()
		inR, inW, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		defer inR.Close()
		var out, errb bytes.Buffer
		cmd := exec.CommandContext(ctx, "unshare", append([]string{"--user", "--map-root-user", "--net", "--",
			"sh", "-c", `echo in >&4 && exec 4>&- && read x <&3 && exec 3<&- && exec "$@"`, "sh", client}, args...)...)
		cmd.ExtraFiles = []*os.File{goR, inW} // 3, 4
		cmd.Stdout, cmd.Stderr = &out, &errb
		err = cmd.Start()
		goR.Close()
		inW.Close()
		if err != nil {
			return nil, err
		}
		defer cmd.Process.Kill() // no-op once waited for
		// Attach only once the shell is in its namespaces.
		if _, err := bufio.NewReader(inR).ReadString('\n'); err != nil {
			cmd.Wait()
			return nil, fmt.Errorf("unshare: %v: %s", err, errb.String())
		}
		readyR, readyW, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		defer readyR.Close()
		exitR, exitW, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		defer exitW.Close()
		var slog bytes.Buffer
		slirp := exec.CommandContext(ctx, "slirp4netns", "--configure", "--mtu="+strconv.Itoa(peerMTU), "--ready-fd=3", "--exit-fd=4",
			strconv.Itoa(cmd.Process.Pid), "tap0")
		slirp.ExtraFiles = []*os.File{readyW, exitR}
		slirp.Stdout, slirp.Stderr = &slog, &slog
		err = slirp.Start()
		readyW.Close()
		exitR.Close()
		if err != nil {
			return nil, err
		}
		if _, err := readyR.Read(make([]byte, 1)); err != nil {
			slirp.Process.Kill()
			slirp.Wait()
			return nil, fmt.Errorf("slirp4netns did not get ready: %v: %s", err, slog.String())
		}
		fmt.Fprintln(goW, "go")
		goW.Close()
		err = cmd.Wait()
		exitW.Close() // slirp4netns exits when this closes
		slirp.Wait()
		return parse(t.name, args, out.Bytes(), errb.Bytes(), err)
	}
	return t
}

// pastaTool runs the client under pasta with the same addresses as the
// others: pasta maps its gateway (10.0.2.2 here) to the host's loopback
// unless --no-map-gw. Port forwarding to and from the namespace is off.
func pastaTool(client string) *tool {
	t := &tool{name: "pasta", host: hostAddr}
	if out, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", "passt").Output(); err == nil && len(out) > 0 {
		t.name = "pasta " + string(out)
	}
	t.run = func(args []string) (*clientResult, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		var out, errb bytes.Buffer
		// As root, pasta drops to nobody by default and then cannot make
		// its namespaces; --runas 0 keeps root (it warns about uid_map).
		cmd := exec.CommandContext(ctx, "pasta", append([]string{"--runas", "0", "--config-net", "-q", "-f",
			"-a", "10.0.2.100", "-n", "24", "-g", hostAddr, "-m", strconv.Itoa(peerMTU),
			"-t", "none", "-u", "none", "-T", "none", "-U", "none", "--", client}, args...)...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return parse(t.name, args, out.Bytes(), errb.Bytes(), err)
	}
	return t
}

// parse reads the client's JSON line.
func parse(name string, args []string, out, errb []byte, err error) (*clientResult, error) {
	var r clientResult
	line := out
	if i := bytes.LastIndexByte(bytes.TrimSpace(out), '\n'); i >= 0 {
		line = out[i+1:]
	}
	if jerr := json.Unmarshal(line, &r); jerr != nil {
		if err == nil {
			err = jerr
		}
		return nil, fmt.Errorf("%s: client %v: %v: %q %q", name, args, err, out, lastLines(errb))
	}
	if r.Err != "" {
		return nil, fmt.Errorf("%s: client %v: %s", name, args, r.Err)
	}
	return &r, nil
}

func lastLines(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, "\n")
}

// throughput times transfers of n bytes each way with every tool.
func throughput(tools []*tool, srv *servers, n int64, rounds int, direction string) {
	for _, dir := range []struct {
		title, cmd string
		addr       func(string) string
	}{
		{"upload, sandbox -> host's loopback", "up", srv.sink},
		{"download, host's loopback -> sandbox", "down", srv.source},
	} {
		if direction != "" && direction != dir.cmd {
			continue
		}
		rate := make([][]float64, len(tools)) // MiB/s per round
		for _, t := range tools {             // warm up
			t.try([]string{dir.cmd, dir.addr(t.host), strconv.FormatInt(16<<20, 10)})
		}
		for i := 0; i < rounds; i++ {
			for j := range tools {
				k := (i + j) % len(tools)
				t := tools[k]
				r := t.try([]string{dir.cmd, dir.addr(t.host), strconv.FormatInt(n, 10)})
				rate[k] = append(rate[k], float64(r.Bytes)/(1<<20)/(float64(r.Nanos)/1e9))
				if logEach {
					fmt.Fprintf(os.Stderr, "%s round %d %s: %.0f MiB/s\n", dir.cmd, i, t.name, rate[k][i])
				}
			}
		}
		fmt.Printf("\nTCP %s, %d MiB per transfer (%d rounds; MTU: pinfold 65520, peers %d)\n", dir.title, n>>20, rounds, peerMTU)
		fmt.Printf("  %-36s %10s %8s %10s %10s\n", "tool", "MiB/s", "Gbit/s", "min MiB/s", "max MiB/s")
		for k, t := range tools {
			m := medianF(rate[k])
			fmt.Printf("  %-36s %10.0f %8.2f %10.0f %10.0f\n", t.name, m, gbit(m), minF(rate[k]), maxF(rate[k]))
		}
		for k, t := range tools {
			if v := maxF(rate[k]) / minF(rate[k]); v > 3 {
				fmt.Printf("  note: %s varies %.0fx between rounds (stalls); its median is not stable\n", t.name, v)
			}
		}
		pf := medianF(rate[0])
		fmt.Printf("  target pinfold >= 1 Gbit/s: %s (%.2f Gbit/s)\n", met(gbit(pf) >= 1), gbit(pf))
		for k := 1; k < len(tools); k++ {
			ratios := make([]float64, rounds)
			for i := range ratios {
				ratios[i] = rate[0][i] / rate[k][i]
			}
			r := medianF(ratios)
			// Downloads: at least pasta's (issue 28); uploads: half.
			target := 0.5
			if dir.cmd == "down" && short(tools[k].name) == "pasta" {
				target = 1.0
			}
			fmt.Printf("  ratio pinfold / %s: median %.2f (min %.2f, max %.2f); target >= %.1f: %s\n",
				short(tools[k].name), r, minF(ratios), maxF(ratios), target, met(r >= target))
		}
		failures(tools)
	}
}

// latency times connect + 1-byte echo from inside: the first tool
// (pinfold's stack) against the second (the host's network), the others
// for context. Each run makes many connects, so start-up is not counted.
func latency(tools []*tool, srv *servers, connects, rounds int) {
	per := make([][]time.Duration, len(tools)) // median of each run
	all := make([][]time.Duration, len(tools)) // every connect
	args := func(t *tool) []string { return []string{"rtt", srv.echo(t.host), strconv.Itoa(connects)} }
	for _, t := range tools { // warm up
		t.try(args(t))
	}
	for i := 0; i < rounds; i++ {
		for j := range tools {
			k := (i + j) % len(tools)
			r := tools[k].try(args(tools[k]))
			d := make([]time.Duration, len(r.RTTs))
			for x, ns := range r.RTTs {
				d[x] = time.Duration(ns)
			}
			per[k] = append(per[k], median(d))
			if logEach {
				fmt.Fprintf(os.Stderr, "rtt run %d %s: median %.3fms\n", i, tools[k].name, ms(per[k][i]))
			}
			all[k] = append(all[k], d...)
		}
	}
	fmt.Printf("\nTCP connect + 1-byte echo from inside to the host's loopback, %d connects per run (%d runs)\n", connects, rounds)
	fmt.Printf("  %-36s %10s %10s %10s\n", "tool", "median", "p10", "p90")
	for k, t := range tools {
		fmt.Printf("  %-36s %8.3fms %8.3fms %8.3fms\n", t.name, ms(median(all[k])), ms(percentile(all[k], 0.1)), ms(percentile(all[k], 0.9)))
	}
	diffs := make([]time.Duration, rounds)
	for i := range diffs {
		diffs[i] = per[0][i] - per[1][i]
	}
	d := median(diffs)
	fmt.Printf("  added by pinfold's stack: median of per-run differences %.3fms (all connects: %.3fms); target <= 1 ms: %s\n",
		ms(d), ms(median(all[0])-median(all[1])), met(d <= time.Millisecond))
	failures(tools)
}

type runner struct {
	name string
	run  func() error
	d    []time.Duration
}

func command(name string, args ...string) func() error {
	return func() error {
		cmd := exec.Command(name, args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s %v: %v: %s", name, args, err, out.String())
		}
		return nil
	}
}

// startup times the CLI's cold start with --network allow against
// --network none, both with --access ro (no changeset), and against
// bubblewrap with the same namespaces (which has no network to serve: the
// target is allow within 1.5x of it). If this pinfold has no --network
// allow, it times the library instead.
func startup(bin string, rounds int) {
	ws, err := os.MkdirTemp("", "pinfold-netbench-ws-")
	check(err)
	tempDirs = append(tempDirs, ws)
	defer os.RemoveAll(ws)
	check(os.Chdir(ws))
	allow := &runner{name: "pinfold run --network allow", run: command(bin, "run", "--access", "ro", "--network", "allow", "--allow", "example.org", "--", "/bin/true")}
	none := &runner{name: "pinfold run --network none", run: command(bin, "run", "--access", "ro", "--network", "none", "--", "/bin/true")}
	title := "CLI cold start, --access ro -- /bin/true"
	if err := allow.run(); err != nil {
		fmt.Printf("\n%s: --network allow fails (%v); measuring the library instead\n", title, firstLine(err))
		title = "library sandbox.Run /bin/true (no pool), cold instance each time"
		allow = &runner{name: "sandbox.Run NetworkAllow", run: library(ws, sandbox.NetworkAllow)}
		none = &runner{name: "sandbox.Run NetworkNone", run: library(ws, sandbox.NetworkNone)}
	}
	bwrap := &runner{name: "bwrap (same isolation)", run: command("bwrap", "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net",
		"--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "/bin/true")}
	rs := []*runner{allow, none}
	if _, err := exec.LookPath("bwrap"); err == nil {
		rs = append(rs, bwrap)
	}
	measure(rs, rounds)
	fmt.Printf("\n%s (%d rounds)\n", title, rounds)
	fmt.Printf("  %-36s %10s %10s %10s\n", "command", "median", "p10", "p90")
	for _, r := range rs {
		fmt.Printf("  %-36s %8.2fms %8.2fms %8.2fms\n", r.name, ms(median(r.d)), ms(percentile(r.d, 0.1)), ms(percentile(r.d, 0.9)))
	}
	diffs := make([]time.Duration, rounds)
	for i := range diffs {
		diffs[i] = allow.d[i] - none.d[i]
	}
	d := median(diffs)
	fmt.Printf("  added by allow: median of per-round differences %.2fms (p25 %.2fms, p75 %.2fms; difference of medians %.2fms); target <= 10 ms: %s\n",
		ms(d), ms(percentile(diffs, 0.25)), ms(percentile(diffs, 0.75)), ms(median(allow.d)-median(none.d)), met(d <= 10*time.Millisecond))
	if len(rs) == 3 {
		ratios := make([]float64, rounds)
		for i := range ratios {
			ratios[i] = float64(allow.d[i]) / float64(bwrap.d[i])
		}
		sort.Float64s(ratios)
		r := ratios[len(ratios)/2]
		fmt.Printf("  allow / bwrap: median of per-round ratios %.3f (p25 %.3f, p75 %.3f); target <= 1.5: %s\n",
			r, ratios[len(ratios)/4], ratios[len(ratios)*3/4], met(r <= 1.5))
	}
}

// memory reports the shared helper's memory (PSS and its anonymous part,
// from smaps_rollup, and how much of the helper's binary the page cache
// holds, which is memory whoever maps it) idle, just after its last
// sandbox and once it released its memory (netstack.ReleaseAfter), and
// with k sandboxes attached for each k in ks, each holding one connection
// open through it: after no traffic but the connect, and after a 16 MiB
// download each. The helper's share per sandbox is its PSS over k; what
// each adds, its growth over the idle figure. Then it times what the
// release costs the next sandbox: rounds pairs of a sandbox that connects
// once to the echo server 1 s after the last one ended and one that
// does so after the release.
func memory(dir string, srv *servers, ks []int, rounds int) {
	helper := os.Getenv("PINFOLD_NET_HELPER")
	spec := sandbox.Spec{Network: sandbox.NetworkOutbound, Mounts: []sandbox.Mount{{Source: dir, Target: "/pinfold-bench", ReadOnly: true}}}
	spec.Net.HostLoopback = true
	// A first run starts the shared helper (and serves itself).
	hold(spec, srv, 1, 0)()
	var pid int
	for range 100 {
		if pid = sharedHelper(helper); pid > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if pid == 0 {
		fail(fmt.Errorf("no shared helper %s serve is running", helper))
	}
	// A binary just built is dirty in the page cache, which keeps it
	// there until written back: write it back now, as an installed one.
	f, err := os.Open(helper)
	check(err)
	check(f.Sync())
	st, err := f.Stat()
	check(err)
	f.Close()
	released := netstack.ReleaseAfter + time.Second
	fmt.Printf("\nThe shared pinfold-net helper's memory (PSS from /proc/%d/smaps_rollup; its binary, %.0f KiB, in the page cache), sandboxes each holding a connection\n", pid, float64(st.Size())/1024)
	fmt.Printf("  %-46s %10s %10s %10s %12s %12s %8s\n", "state", "PSS", "anon", "binary", "PSS / box", "added / box", "threads")
	row := func(state string, k int, idle float64) float64 {
		p, anon := pssOf(pid)
		per, added := "", ""
		if k > 0 {
			per, added = fmt.Sprintf("%.0fKiB", p/float64(k)), fmt.Sprintf("%.0fKiB", (p-idle)/float64(k))
		}
		fmt.Printf("  %-46s %8.0fKiB %8.0fKiB %8.0fKiB %12s %12s %8d\n", state, p, anon, cachedKiB(helper), per, added, threads(pid))
		return p
	}
	// Idle: served sandboxes before, none now. The helper trims its heap
	// once quiet for a second (internal/netstack/trim.go).
	time.Sleep(time.Second + 500*time.Millisecond)
	idle := row("idle, 1.5 s after serving a sandbox", 0, 0)
	time.Sleep(released - 1500*time.Millisecond)
	row(fmt.Sprintf("idle, released (%v after)", released), 0, 0)
	for _, k := range ks {
		for _, n := range []int64{0, 16 << 20} {
			end := hold(spec, srv, k, n)
			time.Sleep(3 * time.Second) // the held, idle state
			state := fmt.Sprintf("%d sandboxes, connected", k)
			if n > 0 {
				state = fmt.Sprintf("%d sandboxes, after %d MiB down each", k, n>>20)
			}
			row(state, k, idle)
			end()
		}
		time.Sleep(time.Second + 500*time.Millisecond)
		row(fmt.Sprintf("idle, 1.5 s after those %d ended", k), 0, 0)
		time.Sleep(released - 1500*time.Millisecond)
		row("idle, released", 0, 0)
	}
	// What the release costs the next sandbox: its run (sandbox.Run:
	// start, one connect and echo, end) and its connect, against a
	// sandbox that comes while the helper still holds its memory.
	if rounds < 1 {
		return
	}
	echo := pinfoldTool(dir, sandbox.NetworkOutbound)
	args := []string{"rtt", srv.echo(hostAddr), "1"}
	echo.try(args)
	var warmRun, warmRTT, relRun, relRTT []time.Duration
	one := func(run, rtt *[]time.Duration) {
		start := time.Now()
		r := echo.try(args)
		*run = append(*run, time.Since(start))
		*rtt = append(*rtt, time.Duration(r.RTTs[0]))
	}
	for i := range rounds {
		if i%2 == 0 {
			time.Sleep(time.Second)
			one(&warmRun, &warmRTT)
			time.Sleep(released)
			one(&relRun, &relRTT)
		} else {
			time.Sleep(released)
			one(&relRun, &relRTT)
			time.Sleep(time.Second)
			one(&warmRun, &warmRTT)
		}
	}
	fmt.Printf("\nThe next sandbox after the release: a run (start, 1 connect + 1-byte echo, end), %d of each, alternating\n", rounds)
	fmt.Printf("  %-46s %10s %10s %10s %10s\n", "", "run p50", "run p90", "connect p50", "connect p90")
	for _, r := range []struct {
		name     string
		run, rtt []time.Duration
	}{{"1 s after the last sandbox (not released)", warmRun, warmRTT}, {fmt.Sprintf("%v after it (released)", released), relRun, relRTT}} {
		fmt.Printf("  %-46s %8.2fms %8.2fms %9.3fms %9.3fms\n", r.name, ms(median(r.run)), ms(percentile(r.run, 0.9)), ms(median(r.rtt)), ms(percentile(r.rtt, 0.9)))
	}
	fmt.Printf("  added by the release: run %+.2fms, connect %+.3fms (medians)\n", ms(median(relRun)-median(warmRun)), ms(median(relRTT)-median(warmRTT)))
}

// hold starts k sandboxes that each download n bytes and hold the
// connection; it returns once all hold, with the function that ends them.
func hold(spec sandbox.Spec, srv *servers, k int, n int64) func() {
	type box struct {
		in   *os.File
		done chan error
	}
	held := make(chan struct{}, k)
	early := make(chan error, k) // a sandbox that ended before it held
	var boxes []box
	for range k {
		r, w, err := os.Pipe()
		check(err)
		b := box{in: w, done: make(chan error, 1)}
		boxes = append(boxes, b)
		go func() {
			defer r.Close()
			var errb bytes.Buffer
			out := &lineWatch{line: "held", seen: held}
			res, err := native.Run(context.Background(), spec, &sandbox.Cmd{
				Args:  []string{"/pinfold-bench/client", "hold", srv.source(hostAddr), strconv.FormatInt(n, 10)},
				Stdin: r, Stdout: out, Stderr: &errb, Timeout: 4 * time.Minute})
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("exit status %d: %s %s", res.ExitCode, out.buf.String(), errb.String())
			}
			if !out.done {
				early <- fmt.Errorf("a sandbox ended before it held its connection: %v", err)
			}
			b.done <- err
		}()
	}
	for range k {
		select {
		case <-held:
		case err := <-early:
			fail(err)
		case <-time.After(2 * time.Minute):
			fail(fmt.Errorf("the sandboxes did not all connect"))
		}
	}
	return func() {
		for _, b := range boxes {
			b.in.Close()
		}
		for _, b := range boxes {
			check(<-b.done)
		}
	}
}

// lineWatch signals seen once its writer wrote line.
type lineWatch struct {
	line string
	seen chan struct{}
	buf  bytes.Buffer
	done bool
}

func (w *lineWatch) Write(p []byte) (int, error) {
	w.buf.Write(p)
	if !w.done && bytes.Contains(w.buf.Bytes(), []byte(w.line+"\n")) {
		w.done = true
		w.seen <- struct{}{}
	}
	return len(p), nil
}

// sharedHelper finds the shared helper running helper's binary.
func sharedHelper(helper string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if exe == helper && bytes.Contains(cmd, []byte("\x00serve\x00")) {
			return pid
		}
	}
	return 0
}

// threads is how many threads pid has.
func threads(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	return len(ents)
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// library runs /bin/true with sandbox.Run, as the CLI would: a new
// sandbox each time, no pool.
func library(ws string, network sandbox.Network) func() error {
	spec := sandbox.Spec{Workspace: ws, Access: sandbox.AccessReadOnly, Network: network}
	if network == sandbox.NetworkAllow {
		spec.Net.Allow = []string{"example.org"}
	}
	return func() error {
		res, err := native.Run(context.Background(), spec, &sandbox.Cmd{Args: []string{"/bin/true"}})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit status %d", res.ExitCode)
		}
		return err
	}
}

// measure runs every runner once per round, rotating who goes first.
func measure(rs []*runner, rounds int) {
	for _, r := range rs { // warm up caches
		for i := 0; i < 5; i++ {
			if err := r.run(); err != nil {
				fail(err)
			}
		}
	}
	for i := 0; i < rounds; i++ {
		for j := range rs {
			r := rs[(i+j)%len(rs)]
			start := time.Now()
			if err := r.run(); err != nil {
				fail(err)
			}
			r.d = append(r.d, time.Since(start))
		}
	}
}

func median(d []time.Duration) time.Duration { return percentile(d, 0.5) }

func percentile(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(float64(len(s)-1)*p+0.5)]
}

func medianF(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

func minF(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

func maxF(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// gbit converts MiB/s to Gbit/s.
func gbit(mibs float64) float64 { return mibs * (1 << 20) * 8 / 1e9 }

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

func short(s string) string { return strings.Fields(s)[0] }

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

func firstLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

func check(err error) {
	if err != nil {
		fail(err)
	}
}

// tempDirs are removed by fail too (os.Exit skips deferred calls).
var tempDirs []string

func fail(err error) {
	pprof.StopCPUProfile()
	for _, d := range tempDirs {
		os.RemoveAll(d)
	}
	fmt.Fprintln(os.Stderr, "network:", err)
	os.Exit(1)
}

// cachedKiB is how much of file the page cache holds, in KiB (mincore
// over a mapping of it, which faults nothing in).
func cachedKiB(file string) float64 {
	f, err := os.Open(file)
	check(err)
	defer f.Close()
	st, err := f.Stat()
	check(err)
	b, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	check(err)
	defer unix.Munmap(b)
	page := os.Getpagesize()
	vec := make([]byte, (len(b)+page-1)/page)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		fail(fmt.Errorf("mincore %s: %w", file, e))
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return float64(n*page) / 1024
}

// pssOf is pid's PSS and anonymous PSS in KiB.
func pssOf(pid int) (pss, anon float64) {
	m, err := procstat.MemoryOf(pid)
	check(err)
	return float64(m.Pss), float64(m.PssAnon)
}
