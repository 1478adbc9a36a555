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
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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

// ---- import ----

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
