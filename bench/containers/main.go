// Command containers measures what pinfold adds to a container engine's
// start: `pinfold run --backend podman|docker --access ro -- true` against
// a plain `podman|docker run --rm` of the same image with the same binds,
// in paired rounds (who goes first alternates), and prints the median of
// the per-round ratios. The goal is an overhead of at most 1.1x.
//
//	./scripts/build.sh && go run ./bench/containers -pinfold bin/pinfold
//
// docker needs a running daemon (start dockerd first).
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/sandbox"
)

func main() {
	pinfold := flag.String("pinfold", "./pinfold", "pinfold binary to measure")
	rounds := flag.Int("rounds", 50, "paired rounds per engine")
	engines := flag.String("engines", "podman,docker", "engines to measure")
	baseline := flag.String("baseline", "", "another pinfold binary (an earlier build) whose changeset run joins each round, for a before/after in one run")
	flag.Parse()
	bin, err := filepath.Abs(*pinfold)
	check(err)
	base := *baseline
	if base != "" {
		base, err = filepath.Abs(base)
		check(err)
	}
	ws, err := os.MkdirTemp("", "pinfold-bench-containers-")
	check(err)
	defer os.RemoveAll(ws)
	check(os.Chdir(ws))
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("load average at the start: %s", load)
	for _, eng := range strings.Split(*engines, ",") {
		if _, err := exec.LookPath(eng); err != nil {
			fmt.Printf("\n%s: skipped (%v)\n", eng, err)
			continue
		}
		pf := []string{bin, "run", "--backend", eng, "--access", "ro", "--", "true"}
		// The first run imports the skeleton image the plain run uses too.
		if out, err := exec.Command(pf[0], pf[1:]...).CombinedOutput(); err != nil {
			fmt.Printf("\n%s: skipped (pinfold run: %v: %s)\n", eng, err, out)
			continue
		}
		plain, err := plainRun(eng)
		check(err)
		cs := []string{bin, "run", "--backend", eng, "--", "true"}
		old := []string{base, "run", "--backend", eng, "--", "true"}
		a, b, c, d := make([]time.Duration, *rounds), make([]time.Duration, *rounds), make([]time.Duration, *rounds), make([]time.Duration, *rounds)
		var ev *events
		if eng == "docker" {
			ev = watchEvents()
		}
		spans = [4][]span{}
		for i := 0; i < *rounds; i++ {
			order := []int{0, 1, 2}
			if base != "" {
				order = append(order, 3)
			}
			if i%2 == 1 {
				slices.Reverse(order)
			}
			for _, j := range order {
				switch j {
				case 0:
					a[i] = timedAs(0, pf)
				case 1:
					b[i] = timedAs(1, plain)
				case 2:
					c[i] = timedAs(2, cs)
				case 3:
					d[i] = timedAs(3, old)
				}
			}
		}
		fmt.Printf("\n%s, %d paired rounds\n", eng, *rounds)
		fmt.Printf("  %-58s %10s %10s\n", "command", "median", "p90")
		row := func(what string, d []time.Duration) {
			fmt.Printf("  %-58s %8.1fms %8.1fms\n", what, ms(median(d)), ms(pct(d, 0.9)))
		}
		row("pinfold run --backend "+eng+" --access ro -- true", a)
		row(eng+" run --rm (same image, binds and limits) true", b)
		row("pinfold run --backend "+eng+" -- true (changeset)", c)
		fmt.Printf("  pinfold --access ro / plain: per-round ratios p50 %.3f, p90 %.3f; goal <= 1.1: %s\n", ratio(a, b), ratioAt(a, b, 0.9), met(ratio(a, b) <= 1.1))
		fmt.Printf("  pinfold changeset / plain: p50 %.3f, p90 %.3f\n", ratio(c, b), ratioAt(c, b, 0.9))
		if base != "" {
			row("baseline "+base+" changeset", d)
			fmt.Printf("  baseline changeset / plain: p50 %.3f, p90 %.3f\n", ratio(d, b), ratioAt(d, b, 0.9))
		}
		if ev != nil {
			// The daemon's events split each run into what its client
			// (pinfold or docker's own) did before the daemon created the
			// container, the daemon's work up to its removal, and what
			// came after: the first and last are what pinfold adds or
			// saves, without the daemon's variance in the middle.
			evs := ev.stop()
			fmt.Printf("  %-58s %12s %12s %12s\n", "split by the daemon's events (medians)", "to create", "daemon", "after destroy")
			names := []string{"pinfold --access ro", eng + " run --rm", "pinfold changeset", "baseline changeset"}
			for k, sp := range spans {
				if len(sp) == 0 {
					continue
				}
				var pre, mid, post []time.Duration
				for _, x := range sp {
					cr, de, ok := evs.within(x)
					if !ok {
						continue
					}
					pre, mid, post = append(pre, cr.Sub(x.start)), append(mid, de.Sub(cr)), append(post, x.end.Sub(de))
				}
				if len(pre) == 0 {
					continue
				}
				fmt.Printf("  %-58s %10.1fms %10.1fms %10.1fms (%d runs)\n", names[k], ms(median(pre)), ms(median(mid)), ms(median(post)), len(pre))
			}
		}
	}
	load, _ = os.ReadFile("/proc/loadavg")
	fmt.Printf("\nload average at the end: %s", load)
}

// plainRun is the engine's own run of pinfold's skeleton image with the
// binds, limits and isolation pinfold gives it.
func plainRun(eng string) ([]string, error) {
	out, err := exec.Command(eng, "images", "--format", "{{.Repository}}:{{.Tag}}").Output()
	if err != nil {
		return nil, err
	}
	var imgs []string
	for _, l := range strings.Fields(string(out)) {
		if strings.Contains(l, "pinfold-skeleton:") {
			imgs = append(imgs, l)
		}
	}
	var nofile unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &nofile)
	args := []string{eng, "run", "--rm", "--network", "none", "--read-only", "--cap-drop", "ALL",
		"--security-opt", "no-new-privileges", "--tmpfs", "/tmp:rw,size=1073741824,mode=1777",
		"--ulimit", fmt.Sprintf("nofile=%d:%d", nofile.Max, nofile.Max), "--ulimit", "nproc=32768:32768"}
	if eng == "podman" {
		if runc, err := exec.LookPath("runc"); err == nil {
			args = append(args, "--runtime", runc)
		}
	}
	for _, d := range sandbox.HostSystemDirs() {
		if fi, err := os.Lstat("/" + d); err == nil && fi.IsDir() {
			args = append(args, "-v", "/"+d+":/"+d+":ro")
		}
	}
	// Skeletons of other pinfold versions may be there too (their tag is
	// a hash of what they hold): the one this pinfold imported runs.
	for _, img := range imgs {
		run := append(append([]string(nil), args...), img, "true")
		if exec.Command(run[0], run[1:]...).Run() == nil {
			return run, nil
		}
	}
	return nil, fmt.Errorf("no pinfold skeleton image in %s runs true (%d found)", eng, len(imgs))
}

// span is when one timed command ran.
type span struct{ start, end time.Time }

// spans are the runs of each of the four commands, for the events' split.
var spans [4][]span

func timedAs(k int, args []string) time.Duration {
	start := time.Now()
	d := timed(args)
	spans[k] = append(spans[k], span{start, start.Add(d)})
	return d
}

// events are the docker daemon's container events, read as they come.
type events struct {
	cmd  *exec.Cmd
	done chan struct{}
	list []event
}

type event struct {
	at     time.Time
	action string
}

func watchEvents() *events {
	e := &events{cmd: exec.Command("docker", "events", "--filter", "type=container", "--format", "{{.TimeNano}} {{.Action}}"), done: make(chan struct{})}
	out, err := e.cmd.StdoutPipe()
	check(err)
	check(e.cmd.Start())
	go func() {
		defer close(e.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var ns int64
			var action string
			if _, err := fmt.Sscan(sc.Text(), &ns, &action); err == nil {
				e.list = append(e.list, event{time.Unix(0, ns), action})
			}
		}
	}()
	time.Sleep(300 * time.Millisecond) // subscribed
	return e
}

func (e *events) stop() *events {
	time.Sleep(500 * time.Millisecond) // the last events in flight
	e.cmd.Process.Kill()
	<-e.done
	e.cmd.Wait()
	return e
}

// within finds the create and destroy events inside x.
func (e *events) within(x span) (created, destroyed time.Time, ok bool) {
	for _, ev := range e.list {
		if ev.at.Before(x.start) || ev.at.After(x.end) {
			continue
		}
		switch ev.action {
		case "create":
			created = ev.at
		case "destroy":
			destroyed = ev.at
		}
	}
	return created, destroyed, !created.IsZero() && !destroyed.IsZero()
}

func timed(args []string) time.Duration {
	cmd := exec.Command(args[0], args[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "%v: %v: %s\n", args, err, out.String())
		os.Exit(1)
	}
	return time.Since(start)
}

func ratio(a, b []time.Duration) float64 { return ratioAt(a, b, 0.5) }

// ratioAt is the q-quantile of the per-round ratios a/b.
func ratioAt(a, b []time.Duration, q float64) float64 {
	r := make([]float64, len(a))
	for i := range a {
		r[i] = float64(a[i]) / float64(b[i])
	}
	sort.Float64s(r)
	return r[int(q*float64(len(r)-1)+0.5)]
}

// pct is the q-quantile of d.
func pct(d []time.Duration, q float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(q*float64(len(s)-1)+0.5)]
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
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
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
