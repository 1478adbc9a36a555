// Command pack measures pinfold pack against its peers, in one run:
//
//   - pack image time against `tar -cf - . | zstd` of the same tree (goal:
//     <= 1.2x). The tree is -tree (directories of this machine) copied
//     once into a dir: base; the workspace is a one-file git repository.
//     Each round times, in rotating order, `pinfold pack image --base
//     dir:TREE --out FILE.tar` (into a fresh file) and `tar -C TREE -cf - .
//     | zstd -q -o FILE` (zstd's default level, one thread). The ratio is
//     the median of the per-round ratios. Both read the tree from the page
//     cache (it is read once first). The image's digest is printed for
//     two packs from two stores: they must be equal.
//
//   - the start of a packed app: `pinfold run APP.pinfold -- true`
//     against `pinfold run --access none --base oci:IMAGE.tar -- true` of
//     the same image (the native run the app should cost no more than
//     1.5x of) and `podman run --rm IMAGE true` (context), after one
//     warm-up run each (the first run of an app or an oci: base unpacks
//     it into the store; that first run is timed and printed too). The
//     image is a busybox base with the workspace. The app runs both ways
//     it can start by default (its first run mounts the root image with
//     squashfuse where that is usable and unpacks the app in the
//     background; the runs after it start from the store) and unpacked
//     into the store first (PINFOLD_APP_MOUNT=0).
//
//   - the first run of a large app (-big: directories of this machine
//     with busybox, packed with pack app): mounted, the run checks the
//     file's digests and mounts its root image; unpacked, it extracts the
//     layers into the store. Each round uses a fresh store, so each is a
//     first run; the app file is in the page cache for both.
//
// Build pinfold and pinfold-pack first (scripts/build.sh), then, as root:
//
//	go run ./bench/pack -pinfold bin/pinfold
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

func main() {
	pinfold := flag.String("pinfold", "bin/pinfold", "pinfold binary (pinfold-pack beside it)")
	tree := flag.String("tree", "usr/lib/python3.11,usr/share/perl", "comma-separated directories under / copied into the packed tree")
	rounds := flag.Int("rounds", 5, "paired rounds of pack image / tar | zstd")
	runs := flag.Int("runs", 20, "paired rounds of the app start-up")
	only := flag.String("only", "", "run one part only: pack, start or first")
	big := flag.String("big", "usr/lib/python3.11,usr/share/perl,usr/share/doc,usr/share/zoneinfo,usr/share/i18n", "comma-separated directories under / in the large app of the first-run bench")
	firsts := flag.Int("firsts", 5, "paired rounds of the large app's first run")
	flag.Parse()
	bin, err := filepath.Abs(*pinfold)
	check(err)
	dir, err := os.MkdirTemp("/var/tmp", "pinfold-bench-pack-")
	check(err)
	benchDir = dir
	defer os.RemoveAll(dir)
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("load average at the start: %s", load)
	ws := filepath.Join(dir, "ws")
	check(os.MkdirAll(ws, 0o755))
	check(os.WriteFile(filepath.Join(ws, "hello.txt"), []byte("hello\n"), 0o644))
	sh(ws, "git init -q && git add . && git -c user.email=b@example.org -c user.name=b commit -qm bench")
	os.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	if *only == "" || *only == "pack" {
		packBench(bin, dir, ws, strings.Split(*tree, ","), *rounds)
	}
	if *only == "" || *only == "start" {
		startBench(bin, dir, ws, *runs)
	}
	if *only == "" || *only == "first" {
		firstBench(bin, dir, ws, strings.Split(*big, ","), *firsts)
	}
	load, _ = os.ReadFile("/proc/loadavg")
	fmt.Printf("load average at the end: %s", load)
}

func packBench(bin, dir, ws string, tree []string, rounds int) {
	root := filepath.Join(dir, "tree")
	for _, t := range tree {
		dst := filepath.Join(root, filepath.Dir(t))
		check(os.MkdirAll(dst, 0o755))
		sh("", "cp -a /"+t+" "+dst+"/")
	}
	size := strings.Fields(sh("", "du -sb "+root))[0]
	files := strings.TrimSpace(sh("", "find "+root+" | wc -l"))
	fmt.Printf("\n== pack image vs tar | zstd: tree %s (%s bytes, %s entries)\n", strings.Join(tree, ","), size, files)
	sh("", "tar -C "+root+" -cf - . > /dev/null") // into the page cache
	pack := func(store, out string) (time.Duration, string) {
		cmd := exec.Command(bin, "pack", "image", "--base", "dir:"+root, "--out", out)
		cmd.Dir = ws
		cmd.Env = append(os.Environ(), "PINFOLD_STORE="+store)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		start := time.Now()
		if err := cmd.Run(); err != nil {
			fail(fmt.Errorf("pinfold pack image: %v: %s", err, e.String()))
		}
		return time.Since(start), strings.TrimSpace(o.String())
	}
	zst := func(out string) time.Duration {
		start := time.Now()
		sh("", "tar -C "+root+" -cf - . | zstd -q -o "+out)
		return time.Since(start)
	}
	_, d1 := pack(filepath.Join(dir, "store-a"), filepath.Join(dir, "a.tar"))
	_, d2 := pack(filepath.Join(dir, "store-b"), filepath.Join(dir, "b.tar"))
	fmt.Printf("digest, first pack:  %s\ndigest, second pack: %s (another store)\n", d1, d2)
	if d1 != d2 {
		fail(fmt.Errorf("the two digests differ"))
	}
	st, _ := os.Stat(filepath.Join(dir, "a.tar"))
	var ratios []float64
	var ps, zs []time.Duration
	for i := range rounds {
		out := filepath.Join(dir, "round.tar")
		zout := filepath.Join(dir, "round.zst")
		var p, z time.Duration
		if i%2 == 0 {
			p, _ = pack(filepath.Join(dir, "store-a"), out)
			z = zst(zout)
		} else {
			z = zst(zout)
			p, _ = pack(filepath.Join(dir, "store-a"), out)
		}
		zst, _ := os.Stat(zout)
		if i == 0 {
			fmt.Printf("sizes: image archive %d bytes, tar.zst %d bytes\n", st.Size(), zst.Size())
		}
		os.Remove(out)
		os.Remove(zout)
		ps, zs = append(ps, p), append(zs, z)
		ratios = append(ratios, float64(p)/float64(z))
		fmt.Printf("round %d: pack image %v, tar | zstd %v, ratio %.2f\n", i+1, p.Round(time.Millisecond), z.Round(time.Millisecond), float64(p)/float64(z))
	}
	fmt.Printf("median: pack image %v, tar | zstd %v, ratio %.2f (goal <= 1.2)\n", median(ps).Round(time.Millisecond), median(zs).Round(time.Millisecond), medianF(ratios))
}

func startBench(bin, dir, ws string, runs int) {
	bb, err := exec.LookPath("busybox")
	check(err)
	root := filepath.Join(dir, "bbroot")
	check(os.MkdirAll(filepath.Join(root, "bin"), 0o755))
	sh("", "cp "+bb+" "+root+"/bin/busybox && ln -s busybox "+root+"/bin/sh && ln -s busybox "+root+"/bin/true")
	base := filepath.Join(dir, "bb.tar")
	sh("", "tar -C "+root+" -cf "+base+" .")
	store := filepath.Join(dir, "store-start")
	env := append(os.Environ(), "PINFOLD_STORE="+store)
	app := filepath.Join(dir, "bench.pinfold")
	img := filepath.Join(dir, "bench.tar")
	for _, args := range [][]string{
		{"pack", "app", "--base", "tar:" + base, "--out", app, "--", "true"},
		{"pack", "image", "--base", "tar:" + base, "--out", img, "--tag", "localhost/pinfold-bench-pack:1", "--", "true"},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Dir, cmd.Env = ws, env
		if b, err := cmd.CombinedOutput(); err != nil {
			fail(fmt.Errorf("%v: %v %s", args, err, b))
		}
	}
	podman := false
	if _, err := exec.LookPath("podman"); err == nil {
		if b, err := exec.Command("podman", "load", "-q", "-i", img).CombinedOutput(); err == nil {
			podman = true
			defer exec.Command("podman", "rmi", "-f", "localhost/pinfold-bench-pack:1").Run()
		} else {
			fmt.Printf("podman load failed, podman left out: %s\n", b)
		}
	}
	type side struct {
		name, store string
		args        []string
		env         []string
	}
	// Each side has a store of its own: the app and the image have the
	// same config, so in one store the second would find the first's root.
	sides := []side{
		{"pinfold run APP -- true (default)", store + "-app", []string{bin, "run", app, "--", "true"}, nil},
		{"pinfold run --base oci:IMAGE -- true", store + "-oci", []string{bin, "run", "--access", "none", "--base", "oci:" + img, "--", "true"}, nil},
		{"pinfold run APP -- true (unpacked)", store + "-unpacked", []string{bin, "run", app, "--", "true"}, []string{"PINFOLD_APP_MOUNT=0"}},
	}
	if podman {
		sides = append(sides, side{"podman run --rm IMAGE true", store, []string{"podman", "run", "--rm", "--runtime", "runc", "--network", "none",
			"--ulimit", "nofile=20000:20000", "--ulimit", "nproc=1000:1000", "localhost/pinfold-bench-pack:1", "true"}, nil})
	}
	run := func(s side) time.Duration {
		args := s.args
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir, cmd.Env = dir, append(append(os.Environ(), "PINFOLD_STORE="+s.store), s.env...)
		start := time.Now()
		if b, err := cmd.CombinedOutput(); err != nil {
			fail(fmt.Errorf("%v: %v %s", args, err, b))
		}
		return time.Since(start)
	}
	fmt.Printf("\n== start-up of a packed app (busybox base), %d paired rounds\n", runs)
	for _, s := range sides {
		fmt.Printf("first run: %-40s %v\n", s.name, run(s).Round(time.Millisecond))
	}
	// The default's first run mounted the app and unpacks it in the
	// background: the rounds measure the runs after that.
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		cmd := exec.Command(bin, "base", "ls")
		cmd.Env = append(os.Environ(), "PINFOLD_STORE="+sides[0].store)
		if b, _ := cmd.Output(); strings.Contains(string(b), "oci") {
			break
		}
		if time.Now().After(end) {
			fail(fmt.Errorf("the first run did not unpack the app in the background"))
		}
	}
	times := make([][]time.Duration, len(sides))
	var ratios, unpRatios, podRatios []float64
	for i := range runs {
		got := make([]time.Duration, len(sides))
		for k := range sides {
			j := (i + k) % len(sides)
			got[j] = run(sides[j])
		}
		for j := range sides {
			times[j] = append(times[j], got[j])
		}
		ratios = append(ratios, float64(got[0])/float64(got[1]))
		unpRatios = append(unpRatios, float64(got[2])/float64(got[1]))
		if podman {
			podRatios = append(podRatios, float64(got[0])/float64(got[3]))
		}
	}
	for j, s := range sides {
		fmt.Printf("median %-40s %v\n", s.name, median(times[j]).Round(10*time.Microsecond))
	}
	fmt.Printf("ratio app (default: after its mounted first run, from the store) / oci: base: %.2f (goal <= 1.5)\n", medianF(ratios))
	fmt.Printf("ratio app (unpacked) / oci: base: %.2f\n", medianF(unpRatios))
	if podman {
		fmt.Printf("ratio app / podman run: %.2f\n", medianF(podRatios))
	}
}

func firstBench(bin, dir, ws string, tree []string, rounds int) {
	root := filepath.Join(dir, "bigroot")
	check(os.MkdirAll(filepath.Join(root, "bin"), 0o755))
	bb, err := exec.LookPath("busybox")
	check(err)
	sh("", "cp "+bb+" "+root+"/bin/busybox && ln -s busybox "+root+"/bin/sh && ln -s busybox "+root+"/bin/true")
	for _, t := range tree {
		dst := filepath.Join(root, filepath.Dir(t))
		check(os.MkdirAll(dst, 0o755))
		sh("", "cp -a /"+t+" "+dst+"/")
	}
	size := strings.Fields(sh("", "du -sb "+root))[0]
	files := strings.TrimSpace(sh("", "find "+root+" | wc -l"))
	app := filepath.Join(dir, "big.pinfold")
	cmd := exec.Command(bin, "pack", "app", "--base", "dir:"+root, "--out", app, "--", "true")
	cmd.Dir, cmd.Env = ws, append(os.Environ(), "PINFOLD_STORE="+filepath.Join(dir, "store-bigpack"))
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		fail(fmt.Errorf("pack app: %v %s", err, b))
	}
	packed := time.Since(start)
	st, err := os.Stat(app)
	check(err)
	sh("", "cat "+app+" > /dev/null") // into the page cache
	fmt.Printf("\n== first run of a large app: %s (%s bytes, %s entries; app file %d bytes, packed in %v), %d paired rounds, a fresh store each\n",
		strings.Join(tree, ","), size, files, st.Size(), packed.Round(time.Millisecond), rounds)
	first := func(env string, n int) time.Duration {
		store := filepath.Join(dir, fmt.Sprintf("store-first-%d", n))
		defer os.RemoveAll(store)
		cmd := exec.Command(bin, "run", app, "--", "true")
		cmd.Dir, cmd.Env = dir, append(os.Environ(), "PINFOLD_STORE="+store, env)
		start := time.Now()
		if b, err := cmd.CombinedOutput(); err != nil {
			fail(fmt.Errorf("run %s: %v %s", app, err, b))
		}
		return time.Since(start)
	}
	var ms, us []time.Duration
	var ratios []float64
	for i := range rounds {
		var m, u time.Duration
		if i%2 == 0 {
			m, u = first("PINFOLD_APP_MOUNT=", 2*i), first("PINFOLD_APP_MOUNT=0", 2*i+1)
		} else {
			u, m = first("PINFOLD_APP_MOUNT=0", 2*i+1), first("PINFOLD_APP_MOUNT=", 2*i)
		}
		ms, us = append(ms, m), append(us, u)
		ratios = append(ratios, float64(m)/float64(u))
		fmt.Printf("round %d: mounted %v, unpacked %v, ratio %.2f\n", i+1, m.Round(time.Millisecond), u.Round(time.Millisecond), float64(m)/float64(u))
	}
	fmt.Printf("median first run: mounted %v, unpacked %v, ratio %.2f\n", median(ms).Round(time.Millisecond), median(us).Round(time.Millisecond), medianF(ratios))
}

func sh(dir, script string) string {
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = dir
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		fail(fmt.Errorf("%s: %v: %s", script, err, e.String()))
	}
	return o.String()
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func medianF(f []float64) float64 {
	s := append([]float64(nil), f...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func check(err error) {
	if err != nil {
		fail(err)
	}
}

// benchDir is removed when the bench fails too (os.Exit runs no defer):
// the large app's tree is hundreds of megabytes.
var benchDir string

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench/pack:", err)
	if benchDir != "" {
		os.RemoveAll(benchDir)
	}
	os.Exit(1)
}
