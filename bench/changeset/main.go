// Command changeset measures pinfold's changeset commands end to end, the
// way a user runs them, against their peers in the same run:
//
//   - `pinfold diff --stat` of a changeset of -files files (a dependency
//     tree unpacked by a real sandboxed run, plus edits to the project)
//     against `git diff --cached --stat` of the same change staged in git;
//   - `pinfold apply` of such a changeset against `cp -a` of its upper
//     directory into a copy of the same project. Each round makes a new
//     changeset and two fresh copies of the project (not timed), then times
//     both, alternating which goes first. The throughput ratio of a round
//     is cp time / apply time; the median over rounds is reported.
//
// Build pinfold first (make build, or go build -o pinfold ./cmd/pinfold):
//
//	go run ./bench/changeset -pinfold ./pinfold
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

func main() {
	pinfold := flag.String("pinfold", "./pinfold", "pinfold binary to measure")
	files := flag.Int("files", 10000, "files in the changeset")
	statRounds := flag.Int("stat-rounds", 21, "rounds of the diff --stat measurement")
	rounds := flag.Int("rounds", 7, "rounds of the apply measurement")
	keep := flag.Bool("keep", false, "keep the scratch directory (to profile a command on it)")
	flag.Parse()
	bin, err := filepath.Abs(*pinfold)
	check(err)
	dir, err := os.MkdirTemp("", "pinfold-bench-changeset-")
	check(err)
	if !*keep {
		defer os.RemoveAll(dir)
	} else {
		fmt.Println("scratch directory:", dir)
	}
	b := &bench{bin: bin, dir: dir, store: filepath.Join(dir, "store")}
	b.project = filepath.Join(dir, "project")
	b.archive = filepath.Join(dir, "deps.tar")
	check(b.makeProject(*files))
	b.stat(*statRounds)
	b.apply(*rounds)
}

type bench struct {
	bin, dir, store  string
	project, archive string
}

// makeProject writes a project of 200 files and an archive of files-100
// dependency files of mixed sizes (mostly small, as in node_modules).
func (b *bench) makeProject(files int) error {
	r := rand.New(rand.NewPCG(1, 2))
	text := func(n int) []byte {
		var buf bytes.Buffer
		for buf.Len() < n {
			fmt.Fprintf(&buf, "line %d of some source text %x\n", buf.Len(), r.Uint32())
		}
		return buf.Bytes()[:n]
	}
	for i := range 200 {
		p := filepath.Join(b.project, "src", fmt.Sprintf("m%02d", i%10), fmt.Sprintf("f%03d.js", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, text(2000), 0o644); err != nil {
			return err
		}
	}
	f, err := os.Create(b.archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for i := range files - 100 {
		size := 200 + r.IntN(4000)
		if i%100 == 99 {
			size = 64<<10 + r.IntN(256<<10)
		}
		name := fmt.Sprintf("node_modules/p%03d/lib/f%05d.js", i/50, i)
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(size), ModTime: time.Unix(1700000000, 0)}); err != nil {
			return err
		}
		if _, err := tw.Write(text(size)); err != nil {
			return err
		}
	}
	return tw.Close()
}

// script unpacks the archive and edits 100 of the project's files.
const script = `tar xf /deps.tar && for f in src/m0*/f0[0-9]*.js; do echo "// edited" >> "$f"; done`

var idRE = regexp.MustCompile(`changeset ([0-9a-f]{12})`)

// changeset copies the project to ws and makes a changeset there with a
// sandboxed run; it returns the changeset's id.
func (b *bench) changeset(ws string) string {
	os.RemoveAll(ws)
	b.run("", "cp", "-a", b.project, ws)
	out := b.run(ws, b.bin, "run", "--mount", b.archive+":/deps.tar:ro", "--", "sh", "-c", script)
	m := idRE.FindStringSubmatch(out)
	if m == nil {
		fail(fmt.Errorf("no changeset id in %q", out))
	}
	return m[1]
}

func (b *bench) run(dir string, args ...string) string {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PINFOLD_STORE="+b.store)
	out, err := cmd.CombinedOutput()
	if err != nil {
		fail(fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, out))
	}
	return string(out)
}

func (b *bench) time(dir string, args ...string) time.Duration {
	start := time.Now()
	b.run(dir, args...)
	return time.Since(start)
}

func (b *bench) stat(rounds int) {
	ws := filepath.Join(b.dir, "stat-ws")
	id := b.changeset(ws)
	// The same change in git: the project committed, the changeset's
	// result staged.
	repo := filepath.Join(b.dir, "stat-git")
	b.run("", "cp", "-a", b.project, repo)
	git := func(args ...string) {
		b.run(repo, append([]string{"git", "-c", "user.name=b", "-c", "user.email=b@b"}, args...)...)
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-qm", "project")
	b.run(repo, "tar", "xf", b.archive)
	b.run(repo, "sh", "-c", strings.TrimPrefix(script, "tar xf /deps.tar && "))
	git("add", "-A")
	pout := b.run(ws, b.bin, "diff", "--stat", id)
	gout := b.run(repo, "git", "diff", "--cached", "--stat")
	if last(pout) != last(gout) {
		fail(fmt.Errorf("pinfold and git disagree:\n%s\n%s", last(pout), last(gout)))
	}
	var p, g []time.Duration
	for i := range rounds + 2 {
		a := b.time(ws, b.bin, "diff", "--stat", id)
		c := b.time(repo, "git", "diff", "--cached", "--stat")
		if i >= 2 { // warm-up
			p, g = append(p, a), append(g, c)
		}
	}
	pm, gm := median(p), median(g)
	fmt.Printf("diff --stat of %s\n", last(pout))
	fmt.Printf("  pinfold diff --stat       median %7.1f ms\n", ms(pm))
	fmt.Printf("  git diff --cached --stat  median %7.1f ms\n", ms(gm))
	fmt.Printf("  ratio pinfold/git %.2f; target: pinfold median <= 100 ms: %s\n", ms(pm)/ms(gm), verdict(ms(pm) <= 100))
}

func (b *bench) apply(rounds int) {
	var ta, tc []time.Duration
	var ratios []float64
	for i := range rounds {
		ws := filepath.Join(b.dir, "apply-ws")
		id := b.changeset(ws)
		target := filepath.Join(b.dir, "cp-target")
		os.RemoveAll(target)
		b.run("", "cp", "-a", b.project, target)
		// cp copies a hard-linked snapshot of the changeset: the same
		// files, which apply removes from the store.
		upper := filepath.Join(b.dir, "snapshot")
		os.RemoveAll(upper)
		b.run("", "cp", "-al", filepath.Join(b.store, "changesets", id, "r0", "upper"), upper)
		b.run("", "sync")
		applyOnce := func() time.Duration { return b.time(ws, b.bin, "apply", id) }
		cpOnce := func() time.Duration { return b.time("", "cp", "-a", upper+"/.", target+"/") }
		var a, c time.Duration
		if i%2 == 0 {
			a, c = applyOnce(), cpOnce()
		} else {
			c, a = cpOnce(), applyOnce()
		}
		ta, tc = append(ta, a), append(tc, c)
		ratios = append(ratios, float64(c)/float64(a))
	}
	slices.Sort(ratios)
	r := ratios[len(ratios)/2]
	fmt.Printf("apply of the same changeset (%d rounds)\n", rounds)
	fmt.Printf("  pinfold apply  median %7.1f ms\n", ms(median(ta)))
	fmt.Printf("  cp -a          median %7.1f ms\n", ms(median(tc)))
	fmt.Printf("  throughput ratio apply/cp: median %.2fx (min %.2fx, max %.2fx); target >= 0.8x: %s\n",
		r, ratios[0], ratios[len(ratios)-1], verdict(r >= 0.8))
}

func last(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

func check(err error) {
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench/changeset:", err)
	os.Exit(1)
}
