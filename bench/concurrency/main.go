// Command concurrency measures many sandboxes at once against
// bubblewrap with the same namespaces:
//
//   - throughput: N workers each start `/bin/true` sandboxes back to back
//     for a fixed number of runs; runs per second, for N = 10 and 100;
//   - memory: K sandboxes running `sleep` at once; the host memory they
//     take, as the sum of the proportional set size (Pss) of every
//     process of each run (the started process and those below it)
//     except the command itself, per sandbox.
//
// Each pinfold mode is measured: --access ro (replayed by the launch
// cache, handed off to the small waiter), the changeset default,
// --network allow, and --access ro with --memory 256m --pids 64 (handed
// off with its cgroups). -throughput=false measures memory only.
//
//	./scripts/build.sh && go run ./bench/concurrency -pinfold bin/pinfold
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pinfold/pinfold/internal/procstat"
)

var bwrap = []string{"bwrap", "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net",
	"--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"}

func main() {
	pinfold := flag.String("pinfold", "bin/pinfold", "pinfold binary to measure")
	runs := flag.Int("runs", 400, "runs per throughput measurement")
	idle := flag.Int("idle", 20, "sandboxes at once in the memory measurement")
	doThroughput := flag.Bool("throughput", true, "measure throughput (else memory only)")
	flag.Parse()
	bin, err := filepath.Abs(*pinfold)
	check(err)
	if os.Getenv("PINFOLD_NET_HELPER") == "" {
		os.Setenv("PINFOLD_NET_HELPER", filepath.Join(filepath.Dir(bin), "pinfold-net"))
	}
	ws, err := os.MkdirTemp("", "pinfold-bench-conc-")
	check(err)
	defer os.RemoveAll(ws)
	check(os.Chdir(ws))
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("load average at the start: %s", load)

	modes := []struct {
		name string
		cmd  func(args ...string) []string
	}{
		{"bwrap (same isolation)", func(a ...string) []string { return append(append([]string{}, bwrap...), a...) }},
		{"pinfold --access ro", func(a ...string) []string {
			return append([]string{bin, "run", "--access", "ro", "--"}, a...)
		}},
		{"pinfold (changeset)", func(a ...string) []string {
			return append([]string{bin, "run", "--"}, a...)
		}},
		{"pinfold --network allow", func(a ...string) []string {
			return append([]string{bin, "run", "--access", "ro", "--network", "allow", "--allow", "example.test", "--"}, a...)
		}},
		{"pinfold --memory --pids", func(a ...string) []string {
			return append([]string{bin, "run", "--access", "ro", "--memory", "256m", "--pids", "64", "--"}, a...)
		}},
	}
	// Warm up: records, images, the shared network helper.
	for _, m := range modes {
		c := m.cmd("/bin/true")
		exec.Command(c[0], c[1:]...).Run()
	}
	sizes := []int{10, 100}
	if !*doThroughput {
		sizes = nil
	}
	for _, n := range sizes {
		fmt.Printf("\nthroughput, %d at once, %d runs of /bin/true\n", n, *runs)
		var base float64
		for i, m := range modes {
			rate := throughput(m.cmd("/bin/true"), n, *runs)
			if i == 0 {
				base = rate
			}
			fmt.Printf("  %-28s %8.1f runs/s  (x%.2f of bwrap)\n", m.name, rate, rate/base)
		}
		// Changesets pile up: drop them between rounds.
		discardAll(bin)
	}
	fmt.Printf("\nhost memory per idle sandbox, %d running `sleep` at once (Pss and Rss of every process but the command)\n", *idle)
	for _, m := range modes {
		p, r, helper := memory(m.cmd("sleep", "30"), *idle)
		if strings.Contains(m.name, "--network") {
			// The shared pinfold-net serves these sandboxes: its Pss,
			// split among them, is theirs too (bench/network -only
			// memory measures it with traffic).
			fmt.Printf("  %-28s %8.0f KiB Pss %8.0f KiB Rss, + %.0f KiB Pss of the shared pinfold-net (%.0f KiB / %d)\n", m.name, p, r, helper/float64(*idle), helper, *idle)
			continue
		}
		fmt.Printf("  %-28s %8.0f KiB Pss %8.0f KiB Rss\n", m.name, p, r)
	}
	discardAll(bin)
	load, _ = os.ReadFile("/proc/loadavg")
	fmt.Printf("\nload average at the end: %s", load)
}

// throughput runs cmd total times with n workers and returns runs/s.
func throughput(cmd []string, n, total int) float64 {
	var wg sync.WaitGroup
	jobs := make(chan struct{}, total)
	for i := 0; i < total; i++ {
		jobs <- struct{}{}
	}
	close(jobs)
	start := time.Now()
	var fail sync.Once
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				c := exec.Command(cmd[0], cmd[1:]...)
				var out bytes.Buffer
				c.Stdout, c.Stderr = &out, &out
				if err := c.Run(); err != nil {
					fail.Do(func() { fmt.Fprintf(os.Stderr, "%v: %v: %s\n", cmd, err, out.String()) })
				}
			}
		}()
	}
	wg.Wait()
	return float64(total) / time.Since(start).Seconds()
}

// memory starts k sandboxes of cmd (a sleep), waits until every one
// runs, and returns the mean Pss and Rss, in KiB, of the processes each
// run added besides its command: the supervisor, waiter, init and helpers
// started for it; and the Pss, in KiB, of the shared network helpers
// already running (started before, so not among those processes).
func memory(cmd []string, k int) (pssKiB, rssKiB, helperKiB float64) {
	before := processes()
	var cs []*exec.Cmd
	for i := 0; i < k; i++ {
		c := exec.Command(cmd[0], cmd[1:]...)
		check(c.Start())
		cs = append(cs, c)
	}
	deadline := time.Now().Add(20 * time.Second)
	for countSleeps(before) < k && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	// Only the runs' own processes: other work on a shared machine
	// starts processes too.
	var total, rss, helper float64
	now := processes()
	netHelper := os.Getenv("PINFOLD_NET_HELPER")
	for pid := range now {
		if _, old := before[pid]; old {
			if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); netHelper != "" && exe == netHelper {
				m, _ := procstat.MemoryOf(pid)
				p := float64(m.Pss)
				helper += p
			}
		}
	}
	for _, c := range cs {
		for _, pid := range procstat.Descendants(c.Process.Pid) {
			if comm, ok := now[pid]; !ok || comm == "sleep" {
				continue
			}
			m, _ := procstat.MemoryOf(pid)
			p, r := float64(m.Pss), float64(m.Rss)
			total, rss = total+p, rss+r
		}
	}
	for _, c := range cs {
		c.Process.Kill()
	}
	for _, c := range cs {
		c.Wait()
	}
	// What a kill leaves to the sandboxes' inits goes with them; give it
	// a moment.
	time.Sleep(500 * time.Millisecond)
	return total / float64(k), rss / float64(k), helper
}

func countSleeps(before map[int]string) int {
	n := 0
	for pid, comm := range processes() {
		if _, old := before[pid]; !old && comm == "sleep" {
			n++
		}
	}
	return n
}

func processes() map[int]string {
	m := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err == nil {
			m[pid] = strings.TrimSpace(string(b))
		}
	}
	return m
}

// discardAll drops the changesets the runs left in the workspace.
func discardAll(bin string) {
	out, err := exec.Command(bin, "changes", "--json").Output()
	if err != nil {
		return
	}
	var list []struct{ ID string }
	json.Unmarshal(out, &list)
	for _, c := range list {
		exec.Command(bin, "discard", c.ID).Run()
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
