// Command changeset measures pinfold's changesets in one run:
//
//   - `diff --stat` of a changeset of 10,000 added small text files: the
//     median time of WriteStat alone, and of Scan followed by WriteStat;
//   - Apply against `cp -a` of the same files: each round copies the
//     original twice, then times Apply into one copy and `cp -a upper/.`
//     into the other, alternating which goes first; it prints the median
//     of the per-round throughput ratios (cp time / Apply time: above 1,
//     Apply is faster).
//
// The changesets are written straight into upper directories, which is
// what an overlay does with new files. Run as root or not; it needs about
// 1 GB free in -dir.
//
//	go run ./bench/changeset -rounds 7
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/pinfold/pinfold/internal/changeset"
)

func main() {
	dir := flag.String("dir", "", "scratch directory (default: a new one in $TMPDIR)")
	files := flag.Int("files", 10000, "files in the --stat changeset")
	statRounds := flag.Int("stat-rounds", 21, "rounds of the --stat measurement")
	rounds := flag.Int("rounds", 7, "rounds of the apply measurement")
	mb := flag.Int("mb", 200, "size of the apply changeset, in MB")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench/changeset:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(*dir, *files, *statRounds, *rounds, *mb); err != nil {
		fmt.Fprintln(os.Stderr, "bench/changeset:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func run(dir string, files, statRounds, rounds, mb int) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "pinfold-bench-changeset-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	if err := benchStat(filepath.Join(dir, "stat"), files, statRounds); err != nil {
		return err
	}
	return benchApply(filepath.Join(dir, "apply"), rounds, mb)
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func benchStat(dir string, n, rounds int) error {
	root := changeset.Root{Lower: filepath.Join(dir, "lower"), Upper: filepath.Join(dir, "upper")}
	if err := os.MkdirAll(root.Lower, 0o755); err != nil {
		return err
	}
	for i := range n {
		p := filepath.Join(root.Upper, fmt.Sprintf("dir%02d/file%05d.txt", i%50, i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, fmt.Appendf(nil, "package p%d\n\nfunc F() int {\n\treturn %d\n}\n", i, i), 0o644); err != nil {
			return err
		}
	}
	roots := []changeset.Root{root}
	ctx := context.Background()
	var stat, both []time.Duration
	for range rounds {
		start := time.Now()
		es, err := changeset.Scan(ctx, roots)
		if err != nil {
			return err
		}
		scanned := time.Now()
		if err := changeset.WriteStat(io.Discard, roots, es, changeset.DiffOptions{}); err != nil {
			return err
		}
		end := time.Now()
		stat = append(stat, end.Sub(scanned))
		both = append(both, end.Sub(start))
	}
	fmt.Printf("diff --stat of %d added files: WriteStat median %v, Scan+WriteStat median %v (%d rounds; target WriteStat <= 100ms)\n",
		n, median(stat).Round(time.Millisecond/10), median(both).Round(time.Millisecond/10), rounds)
	return nil
}

// benchApply builds an original and a changeset of mixed sizes, ~mb MB
// in all: many small files (half of them replacing originals), some
// medium, a few large.
func benchApply(dir string, rounds, mb int) error {
	orig := filepath.Join(dir, "orig")
	upper := filepath.Join(dir, "upper")
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 32<<20)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	write := func(p string, size int) error {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		off := r.IntN(len(buf) - size)
		return os.WriteFile(p, buf[off:off+size], 0o644)
	}
	total, nfiles := 0, 0
	budget := mb << 20
	for i := 0; total < budget; i++ {
		var size int
		switch {
		case i%200 == 199:
			size = 4<<20 + r.IntN(16<<20)
		case i%20 == 19:
			size = 64<<10 + r.IntN(1<<20)
		default:
			size = 512 + r.IntN(16<<10)
		}
		size = min(size, budget-total+1)
		rel := fmt.Sprintf("d%02d/s%02d/f%05d", i%40, i%7, i)
		if i%2 == 0 && size < 64<<10 {
			if err := write(filepath.Join(orig, rel), size/2+1); err != nil {
				return err
			}
		}
		if err := write(filepath.Join(upper, rel), size); err != nil {
			return err
		}
		total += size
		nfiles++
	}
	if err := os.MkdirAll(orig, 0o755); err != nil {
		return err
	}
	ctx := context.Background()
	fresh := func(name string) (string, error) {
		t := filepath.Join(dir, name)
		if err := os.RemoveAll(t); err != nil {
			return "", err
		}
		if out, err := exec.Command("cp", "-a", orig, t).CombinedOutput(); err != nil {
			return "", fmt.Errorf("cp -a: %v: %s", err, out)
		}
		return t, nil
	}
	applyOnce := func() (time.Duration, error) {
		t, err := fresh("target-apply")
		if err != nil {
			return 0, err
		}
		roots := []changeset.Root{{Lower: t, Upper: upper}}
		exec.Command("sync").Run()
		start := time.Now()
		es, err := changeset.Scan(ctx, roots)
		if err != nil {
			return 0, err
		}
		if _, err := changeset.Apply(ctx, filepath.Join(dir, "journal"), roots, es, changeset.ApplyOptions{}); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}
	cpOnce := func() (time.Duration, error) {
		t, err := fresh("target-cp")
		if err != nil {
			return 0, err
		}
		exec.Command("sync").Run()
		start := time.Now()
		if out, err := exec.Command("cp", "-a", upper+"/.", t+"/").CombinedOutput(); err != nil {
			return 0, fmt.Errorf("cp -a: %v: %s", err, out)
		}
		return time.Since(start), nil
	}
	var ratios []float64
	var ta, tc []time.Duration
	for i := range rounds {
		var a, c time.Duration
		var err error
		if i%2 == 0 {
			if a, err = applyOnce(); err == nil {
				c, err = cpOnce()
			}
		} else {
			if c, err = cpOnce(); err == nil {
				a, err = applyOnce()
			}
		}
		if err != nil {
			return err
		}
		ta, tc = append(ta, a), append(tc, c)
		ratios = append(ratios, float64(c)/float64(a))
	}
	slices.Sort(ratios)
	fmt.Printf("apply of %d files, %d MB: Scan+Apply median %v, cp -a median %v; throughput ratio Apply/cp -a: median %.2fx (min %.2fx, max %.2fx; target >= 0.8x)\n",
		nfiles, total>>20, median(ta).Round(time.Millisecond), median(tc).Round(time.Millisecond),
		ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1])
	return nil
}
