// Command store measures two targets of pinfold's store, in one run:
//
//   - looking up an existing image by its sandbox id (target: median
//     <= 5 ms). In process: store.SandboxID plus Store.Image, and the whole
//     lookup path of `pinfold explain` without the process (Open,
//     CuratedBase, SandboxID, Image), each lookup timed on its own, in a
//     store the bench makes (a debian-12 base and an xml image, both with
//     empty trees: a lookup reads only their manifests and the index). Then
//     the CLI: `pinfold explain --access ro -- true` in a workspace whose
//     pinfold.yaml asks for base debian-12 and capability xml, paired with
//     `pinfold version` (the cold start alone), so the per-round
//     difference is the lookup's own share of the command. The CLI runs on
//     the bench's store, or on -store DIR (skipped with a note if that
//     store has no debian-12 base or no such image).
//
//   - importing a tar base (target: <= 1.1x `tar -x` of the same file, in
//     the same run). A tarball of -tree (directories of this machine) is
//     made once and read once so that every side reads it from the page
//     cache. Each round then times, in rotating order: Store.TarBase into
//     a new store (with the UIDShift the CLI passes as root, so the
//     ownership work is in), GNU tar -xf into a new directory (as root it
//     sets owners, looked up by name), and tar -xf --numeric-owner. The
//     import ends with a syncfs (a base must survive a crash whole) and
//     tar does not sync, so each tar side's syncfs right after it is
//     timed too, on its own, and "tar -x + syncfs" is reported as context;
//     so is sha256 of the file (the import hashes what it reads, in the
//     same pass), and the CPU time of each side. Outputs are removed
//     between sides, and the file system synced, outside the timed part.
//     The ratio is the median of the per-round ratios.
//
// Build pinfold first (scripts/bench.sh does), then, as root to include
// the ownership work:
//
//	go run ./bench/store -pinfold bin/pinfold
//
// -cpuprofile FILE profiles this process during the import rounds, in
// which only Store.TarBase and the sha256 of the context row run (tar and
// the removals are other processes): go tool pprof -top FILE. -dir puts
// the scratch files (the tarball, the stores, tar's outputs) on another
// file system; the default is the temp directory.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/internal/store"
)

func main() {
	pinfold := flag.String("pinfold", "./pinfold", "pinfold binary to measure (the CLI lookup)")
	lookups := flag.Int("lookups", 20000, "in-process lookups per variant")
	cliRounds := flag.Int("cli-rounds", 200, "paired rounds of pinfold explain / pinfold version")
	storeDir := flag.String("store", "", "run the CLI lookup on this store instead of the bench's own (e.g. /var/lib/pinfold)")
	rounds := flag.Int("rounds", 5, "paired rounds of the import")
	warmup := flag.Int("warmup", 1, "import rounds run first and not counted")
	tree := flag.String("tree", "usr/lib/python3.11,usr/lib/python3,usr/share/perl,usr/share/locale", "comma-separated directories under / to tar for the import")
	tarball := flag.String("tarball", "", "import this tar file instead of making one from -tree")
	scratch := flag.String("dir", "", "scratch directory (default: the temp directory)")
	only := flag.String("only", "", "run one part only: lookup or import")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of this process during the import rounds to FILE")
	flag.Parse()
	if *only != "" && *only != "lookup" && *only != "import" {
		fail(fmt.Errorf("-only %q: want lookup or import", *only))
	}

	dir, err := os.MkdirTemp(*scratch, "pinfold-bench-store-")
	check(err)
	scratchDir = dir
	defer removeAll(dir)
	check(os.Chmod(dir, 0o700))
	fmt.Printf("scratch: %s (%s), euid %d\n", dir, fsType(dir), os.Geteuid())

	if *only == "" || *only == "lookup" {
		bin, err := filepath.Abs(*pinfold)
		check(err)
		lookup(dir, bin, *storeDir, *lookups, *cliRounds)
	}
	if *only == "" || *only == "import" {
		importBench(dir, *tarball, strings.Split(*tree, ","), *rounds, *warmup, *cpuprofile)
	}
}

// ---- lookup ----

const (
	baseName = store.Debian12
	capName  = "xml"
)

// fakeStore makes a store in dir with a debian-12 base and the image of
// capability xml on it, both in the layout pinfold writes but with empty
// trees: a lookup reads the index, the base's manifest and the image's
// manifest, never a tree. It returns the base's digest.
func fakeStore(dir string) string {
	sum := sha256.Sum256([]byte("pinfold bench store: fake debian-12 base"))
	hexSum := fmt.Sprintf("%x", sum)
	digest := "sha256:" + hexSum
	base := filepath.Join(dir, "bases", baseName, hexSum)
	check(os.MkdirAll(filepath.Join(base, "rootfs"), 0o755))
	writeJSON(filepath.Join(base, "manifest.json"), map[string]any{
		"id": digest, "name": baseName, "suite": "bookworm", "mirror": "http://bench.invalid/debian",
		"packages": []string{"base-files 12.4"}, "created": time.Now().UTC().Format(time.RFC3339), "format": 1,
	})
	check(os.MkdirAll(filepath.Join(dir, "index", "curated"), 0o700))
	check(os.WriteFile(filepath.Join(dir, "index", "curated", baseName), []byte(digest+"\n"), 0o600))
	return digest
}

// fakeImage makes the image with sandbox id id on base in the store dir,
// as BuildImage leaves it.
func fakeImage(dir, id, base string) {
	d := filepath.Join(dir, "images", strings.TrimPrefix(id, "sha256:"))
	check(os.MkdirAll(filepath.Join(d, "rootfs"), 0o755))
	check(os.MkdirAll(filepath.Join(d, "layer"), 0o755))
	writeJSON(filepath.Join(d, "manifest.json"), store.ImageInfo{
		ID: id, Base: base, Capabilities: []string{capName},
		Packages: []string{"libxml2", "libxslt1.1", "libxml2-dev", "libxslt1-dev"},
		Created:  time.Now().UTC().Format(time.RFC3339), Version: "bench",
		Format: 1, // the store's manifest format; another one fails Image with ErrFormat
	})
}

func writeJSON(path string, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	check(err)
	check(os.WriteFile(path, append(b, '\n'), 0o644))
}

// env is the environment profile of a run without a profile, as the CLI
// hashes it.
var env = []string{"profile="}

func lookup(dir, bin, storeDir string, n, cliRounds int) {
	sdir := filepath.Join(dir, "store")
	check(os.Mkdir(sdir, 0o700))
	baseDigest := fakeStore(sdir)
	id := store.SandboxID(baseDigest, []string{capName}, env)
	fakeImage(sdir, id, baseDigest)

	st, err := store.Open(sdir)
	check(err)
	img, err := st.Image(id)
	check(err)
	if img.ID != id || img.Base != baseDigest {
		fail(fmt.Errorf("Image(%s) = %+v", id, img))
	}
	byID := &runner{name: "SandboxID + Image", run: func() error {
		img, err := st.Image(store.SandboxID(baseDigest, []string{capName}, env))
		if err == nil && img.ID == "" {
			err = fmt.Errorf("no id")
		}
		return err
	}}
	// explain's path without the process: open the store, find the base,
	// name the system, read its image.
	path := &runner{name: "Open + CuratedBase + SandboxID + Image", run: func() error {
		st, err := store.Open(sdir)
		if err != nil {
			return err
		}
		b, err := st.CuratedBase(baseName)
		if err != nil {
			return err
		}
		_, err = st.Image(store.SandboxID(b.Digest, []string{capName}, env))
		return err
	}}
	lib := []*runner{byID, path}
	measure(lib, n, 100)
	fmt.Printf("\nlookup of an existing image by sandbox id, in process (%d lookups each, timed one by one)\n", n)
	table(lib)
	m := median(byID.d)
	fmt.Printf("  target: lookup median <= 5 ms: %s (SandboxID + Image %.4fms; with Open + CuratedBase %.4fms)\n",
		met(m <= 5*time.Millisecond && median(path.d) <= 5*time.Millisecond), ms(m), ms(median(path.d)))

	// The CLI, on the bench's store or on -store.
	ws := filepath.Join(dir, "ws")
	check(os.Mkdir(ws, 0o755))
	check(os.WriteFile(filepath.Join(ws, "pinfold.yaml"), []byte("version: 1\nbase: "+baseName+"\ncapabilities: ["+capName+"]\n"), 0o644))
	cliStore, where := sdir, "the bench's store"
	if storeDir != "" {
		cliStore, where = storeDir, storeDir
	}
	explainArgs := []string{"explain", "--access", "ro", "--", "true"}
	explain := cliCommand(bin, ws, cliStore, explainArgs...)
	out, err := explain()
	if err != nil {
		fmt.Printf("\nCLI lookup skipped: %v\n", err)
		return
	}
	sid := regexp.MustCompile(`sandbox id:\s+(sha256:[0-9a-f]{64})`).FindStringSubmatch(out)
	if storeDir == "" && sid != nil && strings.Contains(out, "image not built yet") {
		// This pinfold names the system differently: make that image too.
		fakeImage(sdir, sid[1], baseDigest)
		out, _ = explain()
	}
	switch {
	case strings.Contains(out, "not in the store yet"):
		fmt.Printf("\nCLI lookup skipped: %s has no %s base (`pinfold explain` says it is not in the store yet); build it with `pinfold base build %s` (or run the bench on its own store: no -store)\n", where, baseName, baseName)
		return
	case sid == nil || !strings.Contains(out, "image built"):
		fmt.Printf("\nCLI lookup skipped: %s has no image of %s with %s; `pinfold explain` says:\n%s", where, baseName, capName, indent(out))
		return
	}
	version := cliCommand(bin, ws, cliStore, "version")
	cli := []*runner{
		{name: "pinfold " + strings.Join(explainArgs, " "), run: func() error { _, err := explain(); return err }},
		{name: "pinfold version (cold start)", run: func() error { _, err := version(); return err }},
	}
	measure(cli, cliRounds, 10)
	fmt.Printf("\nCLI lookup of an existing image, cold process, on %s (%d paired rounds)\n", where, cliRounds)
	fmt.Printf("  image: %s\n", sid[1])
	table(cli)
	diffs := make([]time.Duration, cliRounds)
	for i := range diffs {
		diffs[i] = cli[0].d[i] - cli[1].d[i]
	}
	fmt.Printf("  explain's own share (explain - version): median of per-round differences %.3fms (p25 %.3fms, p75 %.3fms)\n",
		ms(median(diffs)), ms(percentile(diffs, 0.25)), ms(percentile(diffs, 0.75)))
	fmt.Printf("  (context: explain also parses the config and resolves the run; the lookup itself is the in-process figure above)\n")
}

// cliCommand runs pinfold in ws with PINFOLD_STORE set to storeDir and
// returns its output.
func cliCommand(bin, ws, storeDir string, args ...string) func() (string, error) {
	environ := append(os.Environ(), "PINFOLD_STORE="+storeDir)
	return func() (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Dir, cmd.Env = ws, environ
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return out.String(), fmt.Errorf("pinfold %s: %v: %s", strings.Join(args, " "), err, out.String())
		}
		return out.String(), nil
	}
}

// ---- import ----

// side is one way of extracting the tarball into out, a path that does
// not exist yet.
type side struct {
	name  string
	setup func(out string) error                  // not timed
	run   func(out string) (time.Duration, error) // returns the CPU time (user + system) it took
	d     []time.Duration                         // the extraction
	cpu   []time.Duration                         // its CPU time
	sync  []time.Duration                         // a syncfs right after it
}

// inProcess runs f in this process and returns the CPU time the process
// spent meanwhile.
func inProcess(f func(out string) error) func(string) (time.Duration, error) {
	return func(out string) (time.Duration, error) {
		before := selfCPU()
		err := f(out)
		return selfCPU() - before, err
	}
}

func selfCPU() time.Duration {
	var ru unix.Rusage
	check(unix.Getrusage(unix.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func importBench(dir, tarball string, tree []string, rounds, warmup int, cpuprofile string) {
	if tarball == "" {
		tarball = makeTarball(dir, tree)
	}
	tarball, err := filepath.Abs(tarball)
	check(err)
	fi, err := os.Stat(tarball)
	check(err)
	entries := countEntries(tarball)
	// Read once: every side then reads it from the page cache.
	f, err := os.Open(tarball)
	check(err)
	_, err = io.Copy(io.Discard, f)
	f.Close()
	check(err)
	syncfs(dir)

	shift := store.Shift()
	ctx := context.Background()
	mkdir := func(out string) error { return os.Mkdir(out, 0o755) }
	tarSide := func(name string, extra ...string) *side {
		args := append([]string{"-xf", tarball}, extra...)
		return &side{name: name, setup: mkdir, run: func(out string) (time.Duration, error) {
			cmd := exec.Command("tar", append(args, "-C", out)...)
			var b bytes.Buffer
			cmd.Stdout, cmd.Stderr = &b, &b
			if err := cmd.Run(); err != nil {
				return 0, fmt.Errorf("%s: %v: %s", cmd, err, b.String())
			}
			return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
		}}
	}
	sides := []*side{
		{name: "pinfold Store.TarBase", run: inProcess(func(out string) error {
			st, err := store.Open(out)
			if err != nil {
				return err
			}
			_, err = st.TarBase(ctx, tarball, store.ImportOptions{UIDShift: shift})
			return err
		})},
		tarSide("tar -xf"),
		tarSide("tar -xf --numeric-owner", "--numeric-owner"),
	}
	// A baseline of what the import does besides extracting: hashing the
	// file (it is read once, hashed and extracted in the same pass).
	hash := &side{name: "sha256 of the tarball (context)", run: inProcess(func(string) error {
		f, err := os.Open(tarball)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(sha256.New(), f)
		return err
	})}

	n := 0
	once := func(s *side, record bool) {
		n++
		out := filepath.Join(dir, fmt.Sprintf("out-%d", n))
		if s.setup != nil {
			check(s.setup(out))
		}
		syncfs(dir)
		start := time.Now()
		cpu, err := s.run(out)
		d := time.Since(start)
		check(err)
		start = time.Now()
		syncfs(dir)
		sd := time.Since(start)
		if record {
			s.d, s.cpu, s.sync = append(s.d, d), append(s.cpu, cpu), append(s.sync, sd)
		} else if s == sides[0] || s == sides[1] {
			checkTree(s.name, out, entries, shift)
		}
		if s != hash {
			removeAll(out)
			syncfs(dir)
		}
	}
	fmt.Printf("\nimport of a tar base: %s, %.1f MiB, %d entries (%d warm-up + %d paired rounds)\n",
		tarball, float64(fi.Size())/(1<<20), entries, warmup, rounds)
	if shift != 0 {
		fmt.Printf("  as root: pinfold shifts owners by %d; tar sets the archive's owners\n", shift)
	} else {
		fmt.Printf("  not root: neither pinfold nor tar sets owners\n")
	}
	all := append(sides[:len(sides):len(sides)], hash)
	for i := 0; i < warmup; i++ {
		for _, s := range all {
			once(s, false)
		}
	}
	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		check(err)
		check(pprof.StartCPUProfile(f))
		defer pprof.StopCPUProfile()
	}
	for i := 0; i < rounds; i++ {
		for j := range sides {
			once(sides[(i+j)%len(sides)], true)
		}
		once(hash, true)
		fmt.Fprintf(os.Stderr, "round %d/%d: %s %.0fms, %s %.0fms\n", i+1, rounds, short(sides[0].name), ms(sides[0].d[i]), short(sides[1].name), ms(sides[1].d[i]))
	}
	if cpuprofile != "" {
		pprof.StopCPUProfile()
	}

	fmt.Printf("  %-36s %10s %10s %10s %10s %16s\n", "command", "median", "min", "max", "CPU", "syncfs after it")
	for _, s := range all {
		fmt.Printf("  %-36s %8.0fms %8.0fms %8.0fms %8.0fms %14.0fms\n", s.name, ms(median(s.d)), ms(minD(s.d)), ms(maxD(s.d)), ms(median(s.cpu)), ms(median(s.sync)))
	}
	// tar -x followed by a syncfs: the same durability as the import; and
	// the hash on top: the same work.
	synced := make([]time.Duration, rounds)
	hashed := make([]time.Duration, rounds)
	for i := range synced {
		synced[i] = sides[1].d[i] + sides[1].sync[i]
		hashed[i] = synced[i] + hash.d[i]
	}
	fmt.Printf("  %-36s %8.0fms %8.0fms %8.0fms\n", "tar -xf + syncfs (context)", ms(median(synced)), ms(minD(synced)), ms(maxD(synced)))
	fmt.Printf("  %-36s %8.0fms %8.0fms %8.0fms\n", "tar -xf + syncfs + sha256 (context)", ms(median(hashed)), ms(minD(hashed)), ms(maxD(hashed)))
	fmt.Printf("  pinfold's CPU time is its own process (user + system, the hash in); tar's is the tar process's\n")
	r := ratios(sides[0].d, sides[1].d)
	fmt.Printf("  ratio pinfold / tar -xf: median %.3f (min %.3f, max %.3f); target <= 1.1: %s\n", r[len(r)/2], r[0], r[len(r)-1], met(r[len(r)/2] <= 1.1))
	r = ratios(sides[0].d, sides[2].d)
	fmt.Printf("  ratio pinfold / tar -xf --numeric-owner: median %.3f (min %.3f, max %.3f)\n", r[len(r)/2], r[0], r[len(r)-1])
	r = ratios(sides[0].d, synced)
	fmt.Printf("  ratio pinfold / (tar -xf + syncfs): median %.3f (min %.3f, max %.3f)\n", r[len(r)/2], r[0], r[len(r)-1])
	r = ratios(sides[0].d, hashed)
	fmt.Printf("  ratio pinfold / (tar -xf + syncfs + sha256): median %.3f (min %.3f, max %.3f)\n", r[len(r)/2], r[0], r[len(r)-1])
	if cpuprofile != "" {
		fmt.Printf("  CPU profile of the import rounds: %s (go tool pprof -top %s)\n", cpuprofile, cpuprofile)
	}
}

// makeTarball tars the directories of tree (those that exist) under /.
func makeTarball(dir string, tree []string) string {
	var have []string
	for _, t := range tree {
		t = strings.Trim(strings.TrimSpace(t), "/")
		if t == "" {
			continue
		}
		if _, err := os.Lstat("/" + t); err == nil {
			have = append(have, t)
		}
	}
	if len(have) == 0 {
		fail(fmt.Errorf("none of -tree %s exists", strings.Join(tree, ",")))
	}
	path := filepath.Join(dir, "base.tar")
	fmt.Printf("making %s from /{%s}\n", path, strings.Join(have, ","))
	check(run("tar", append([]string{"-C", "/", "-cf", path}, have...)...))
	return path
}

// countEntries counts the tarball's entries with tar -t.
func countEntries(tarball string) int {
	cmd := exec.Command("tar", "-tf", tarball)
	out, err := cmd.StdoutPipe()
	check(err)
	check(cmd.Start())
	n := 0
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		n++
	}
	check(cmd.Wait())
	return n
}

// checkTree checks an output of the warm-up: as many entries as the
// archive (tar's leading directories aside), and owners shifted.
func checkTree(name, out string, entries int, shift uint32) {
	root := out
	if _, err := os.Stat(filepath.Join(out, "bases")); err == nil { // a store
		m, _ := filepath.Glob(filepath.Join(out, "bases", "tar", "*", "rootfs"))
		if len(m) != 1 {
			fail(fmt.Errorf("%s: no base in %s", name, out))
		}
		root = m[0]
	}
	n, owner := 0, map[uint32]int{}
	check(filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		n++
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		owner[st.Uid]++
		return nil
	}))
	var owners []string
	for u, c := range owner {
		owners = append(owners, fmt.Sprintf("uid %d: %d", u, c))
	}
	sort.Strings(owners)
	fmt.Printf("  check %s: %d entries below the root (archive: %d); %s\n", name, n, entries, strings.Join(owners, ", "))
	if n < entries {
		fail(fmt.Errorf("%s extracted %d entries, the archive has %d", name, n, entries))
	}
}

// ---- helpers ----

type runner struct {
	name string
	run  func() error
	d    []time.Duration
}

// measure runs every runner once per round after warm rounds, rotating
// who goes first.
func measure(rs []*runner, rounds, warm int) {
	for _, r := range rs {
		for i := 0; i < warm; i++ {
			check(r.run())
		}
	}
	for i := 0; i < rounds; i++ {
		for j := range rs {
			r := rs[(i+j)%len(rs)]
			start := time.Now()
			check(r.run())
			r.d = append(r.d, time.Since(start))
		}
	}
}

func table(rs []*runner) {
	fmt.Printf("  %-46s %10s %10s %10s %10s\n", "what", "median", "p10", "p90", "p99")
	for _, r := range rs {
		fmt.Printf("  %-46s %8.3fms %8.3fms %8.3fms %8.3fms\n", r.name, ms(median(r.d)), ms(percentile(r.d, 0.1)), ms(percentile(r.d, 0.9)), ms(percentile(r.d, 0.99)))
	}
}

func ratios(a, b []time.Duration) []float64 {
	r := make([]float64, len(a))
	for i := range r {
		r[i] = float64(a[i]) / float64(b[i])
	}
	sort.Float64s(r)
	return r
}

func run(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out.String())
	}
	return nil
}

// removeAll removes a tree with rm, in another process, so that a CPU
// profile of this one shows only the import; directories an archive made
// read-only are opened up first if rm fails.
func removeAll(p string) {
	if run("rm", "-rf", p) == nil {
		return
	}
	run("chmod", "-R", "u+rwx", p)
	if err := run("rm", "-rf", p); err != nil {
		fmt.Fprintln(os.Stderr, "store:", err)
	}
}

func syncfs(dir string) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	check(err)
	defer unix.Close(fd)
	check(unix.Syncfs(fd))
}

func fsType(dir string) string {
	var s unix.Statfs_t
	if unix.Statfs(dir, &s) != nil {
		return "unknown file system"
	}
	switch s.Type {
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlayfs"
	}
	return fmt.Sprintf("file system %#x", s.Type)
}

func median(d []time.Duration) time.Duration { return percentile(d, 0.5) }

func percentile(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(float64(len(s)-1)*p+0.5)]
}

func minD(d []time.Duration) time.Duration {
	m := d[0]
	for _, x := range d {
		m = min(m, x)
	}
	return m
}

func maxD(d []time.Duration) time.Duration {
	m := d[0]
	for _, x := range d {
		m = max(m, x)
	}
	return m
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

func short(s string) string { return strings.Fields(s)[0] }

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

func check(err error) {
	if err != nil {
		fail(err)
	}
}

// scratchDir is removed on failure too.
var scratchDir string

func fail(err error) {
	fmt.Fprintln(os.Stderr, "store:", err)
	if scratchDir != "" {
		removeAll(scratchDir)
	}
	os.Exit(1)
}
