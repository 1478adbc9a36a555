// Command writes measures write-heavy commands in a changeset against the
// same commands writing the workspace directly (--access rw), round after
// round, the way a developer runs installs and throws them away:
//
//   - untar: `tar xf` of -files files (28 MB for 10,000) in a changeset,
//     then `pinfold discard` (discard rounds) or `pinfold apply` (apply
//     rounds), against the same `tar xf` with --access rw into a fresh
//     directory of the workspace; the three alternate within each round;
//   - npm: `npm install --offline` of a project whose dependencies are
//     -packages local tarballs (no registry), in a changeset then
//     discarded, against the same install with --access rw in a fresh
//     copy of the project.
//
// It prints each round, the median ratio changeset/rw, and whether the
// rounds stay flat (the median of the last quarter against the first),
// with the load average before and after.
//
//	./scripts/build.sh && go run ./bench/writes -pinfold bin/pinfold
package main

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

func main() {
	pinfold := flag.String("pinfold", "bin/pinfold", "pinfold binary to measure")
	files := flag.Int("files", 10000, "files in the archive")
	rounds := flag.Int("rounds", 20, "rounds of each untar mode")
	packages := flag.Int("packages", 300, "npm packages (30 files each); 0 skips npm")
	npmRounds := flag.Int("npm-rounds", 10, "rounds of npm install")
	base := flag.String("dir", "/var/tmp", "where the scratch directory goes (the store's filesystem)")
	fresh := flag.String("fresh-fs", "", "SIZE (e.g. 8G): run on a new ext4 file system of that size, made and mounted for this run (root), so that no earlier run's deletions slow either side")
	flag.Parse()
	bin, err := filepath.Abs(*pinfold)
	check(err)
	if *fresh != "" {
		mnt, done := freshFS(*base, *fresh)
		atExit = done
		defer done()
		*base = mnt
	}
	dir, err := os.MkdirTemp(*base, "pinfold-bench-writes-")
	check(err)
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	// Its directories (the workspaces, the store) spread over block groups
	// of their own, away from what earlier runs deleted, so that the rw
	// baseline is not slowed by ext4 skipping recently deleted inodes
	// (see internal/changeset/spread_linux.go).
	exec.Command("chattr", "+T", dir).Run()
	b := &bench{bin: bin, dir: dir, store: filepath.Join(dir, "store"), data: filepath.Join(dir, "data")}
	check(os.MkdirAll(b.data, 0o755))
	fmt.Printf("load before: %s", loadavg())
	check(writeArchive(filepath.Join(b.data, "deps.tar"), *files))
	b.untar(*rounds)
	if *packages > 0 {
		if _, err := exec.LookPath("npm"); err != nil {
			fmt.Println("npm: not installed, skipped")
		} else {
			b.npm(*packages, *npmRounds)
		}
	}
	fmt.Printf("load after: %s", loadavg())
}

type bench struct {
	bin, dir, store, data string
}

// pf runs pinfold in dir and returns how long it took.
func (b *bench) pf(dir string, args ...string) time.Duration {
	cmd := exec.Command(b.bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PINFOLD_STORE="+b.store)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	d := time.Since(start)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pinfold %s: %v\n%s", strings.Join(args, " "), err, out)
		exit(1)
	}
	return d
}

func (b *bench) workspace(name string) string {
	ws := filepath.Join(b.dir, name)
	check(os.MkdirAll(ws, 0o755))
	check(os.WriteFile(filepath.Join(ws, "pinfold.yaml"), []byte("version: 1\n"), 0o644))
	return ws
}

func (b *bench) untar(rounds int) {
	ws := b.workspace("project")
	mount := b.data + ":/data:ro"
	var rw, discard, apply []float64
	fmt.Println("round   rw (s)   changeset+discard (s)   changeset+apply (s, run / apply)")
	for i := range rounds {
		into := fmt.Sprintf("rw-%d", i)
		check(os.Mkdir(filepath.Join(ws, into), 0o755))
		tRW := b.pf(ws, "run", "-q", "--access", "rw", "-v", mount, "--", "tar", "xf", "/data/deps.tar", "-C", into)
		check(os.Mkdir(filepath.Join(ws, "cs"), 0o755))
		tD := b.pf(ws, "run", "-q", "-v", mount, "--", "tar", "xf", "/data/deps.tar", "-C", "cs")
		b.pf(ws, "discard")
		into = fmt.Sprintf("ap-%d", i)
		check(os.Mkdir(filepath.Join(ws, into), 0o755))
		tA := b.pf(ws, "run", "-q", "-v", mount, "--", "tar", "xf", "/data/deps.tar", "-C", into)
		tApply := b.pf(ws, "apply")
		os.Remove(filepath.Join(ws, "cs"))
		fmt.Printf("%5d   %6.3f   %6.3f                  %6.3f / %6.3f\n", i+1, tRW.Seconds(), tD.Seconds(), tA.Seconds(), tApply.Seconds())
		rw, discard, apply = append(rw, tRW.Seconds()), append(discard, tD.Seconds()), append(apply, tA.Seconds())
	}
	report("untar, changeset+discard", discard, rw)
	report("untar, changeset+apply", apply, rw)
}

// report prints the median ratio of xs to the baseline's rounds and how
// the last quarter of xs compares with its first.
func report(what string, xs, baseline []float64) {
	if len(xs) == 0 {
		return // -rounds 0 or -npm-rounds 0: nothing measured
	}
	ratios := make([]float64, len(xs))
	for i := range xs {
		ratios[i] = xs[i] / baseline[i]
	}
	q := max(len(xs)/4, 1)
	first, last := median(xs[:q]), median(xs[len(xs)-q:])
	fmt.Printf("%s: median %.3f s against rw %.3f s: ratio %.2f (per-round median); first quarter %.3f s, last quarter %.3f s (x%.2f)\n",
		what, median(xs), median(baseline), median(ratios), first, last, last/first)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// npm measures an offline install of local tarballs.
func (b *bench) npm(packages, rounds int) {
	tarballs := filepath.Join(b.dir, "tarballs")
	check(os.MkdirAll(tarballs, 0o755))
	deps := map[string]string{}
	for i := range packages {
		name := fmt.Sprintf("pf-bench-pkg%d", i)
		path := filepath.Join(tarballs, name+".tgz")
		check(writePackage(path, name, 30))
		deps[name] = "file:" + path
	}
	pkgJSON, _ := json.Marshal(map[string]any{"name": "bench", "version": "1.0.0", "dependencies": deps})
	mount := tarballs + ":" + tarballs + ":ro"
	install := []string{"--", "npm", "install", "--offline", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"}
	var rw, cs []float64
	fmt.Printf("npm install of %d local packages (%d files)\nround   rw (s)   changeset+discard (s)\n", packages, packages*30)
	for i := range rounds {
		wsRW := b.workspace(fmt.Sprintf("npm-rw-%d", i))
		check(os.WriteFile(filepath.Join(wsRW, "package.json"), pkgJSON, 0o644))
		tRW := b.pf(wsRW, append([]string{"run", "-q", "--access", "rw", "-v", mount}, install...)...)
		wsCS := b.workspace(fmt.Sprintf("npm-cs-%d", i))
		check(os.WriteFile(filepath.Join(wsCS, "package.json"), pkgJSON, 0o644))
		tCS := b.pf(wsCS, append([]string{"run", "-q", "-v", mount}, install...)...)
		b.pf(wsCS, "discard")
		fmt.Printf("%5d   %6.3f   %6.3f\n", i+1, tRW.Seconds(), tCS.Seconds())
		rw, cs = append(rw, tRW.Seconds()), append(cs, tCS.Seconds())
	}
	report("npm install, changeset+discard", cs, rw)
}

// writeArchive writes n files of 500 to 5,000 random bytes in 200
// directories, like an unpacked dependency tree.
func writeArchive(path string, n int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 5000)
	for i := range n {
		size := 500 + r.IntN(4500)
		for j := range size {
			buf[j] = byte(r.Uint32())
		}
		name := fmt.Sprintf("node_modules/pkg%d/lib/f%d.js", i/50, i)
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(size), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(buf[:size]); err != nil {
			return err
		}
	}
	return tw.Close()
}

// writePackage writes an npm package tarball of files small modules.
func writePackage(path, name string, files int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	add := func(n string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: "package/" + n, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	pj, _ := json.Marshal(map[string]string{"name": name, "version": "1.0.0", "main": "index.js"})
	if err := add("package.json", pj); err != nil {
		return err
	}
	for i := range files - 1 {
		src := fmt.Sprintf("module.exports = function f%d(x) { return x + %d; };\n%s", i, i, strings.Repeat("// padding\n", 100))
		if err := add(fmt.Sprintf("lib/m%d.js", i), []byte(src)); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return string(b)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		exit(1)
	}
}

// atExit undoes -fresh-fs when the benchmark stops early.
var atExit = func() {}

func exit(code int) {
	atExit()
	os.Exit(code)
}

// freshFS makes an ext4 file system of size in a sparse file under dir,
// mounts it, and returns where, and how to undo both.
func freshFS(dir, size string) (string, func()) {
	img, err := os.CreateTemp(dir, "pinfold-bench-writes-*.img")
	check(err)
	img.Close()
	mnt, err := os.MkdirTemp(dir, "pinfold-bench-writes-mnt-")
	check(err)
	undo := func() {
		exec.Command("umount", mnt).Run()
		os.Remove(mnt)
		os.Remove(img.Name())
	}
	for _, c := range [][]string{
		{"truncate", "-s", size, img.Name()},
		{"mkfs.ext4", "-q", "-F", img.Name()},
		{"mount", "-o", "loop", img.Name(), mnt},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			undo()
			fmt.Fprintf(os.Stderr, "%s: %v\n%s", strings.Join(c, " "), err, out)
			os.Exit(1)
		}
	}
	fmt.Printf("on a new ext4 file system of %s at %s\n", size, mnt)
	return mnt, undo
}
