// Command workload measures a file-heavy command inside pinfold: unpacking
// an archive of 10,000 small files, with the workspace as a changeset (the
// writes land in an overlay's upper directory in the store) against a plain
// read-write bind of the same workspace. Rounds are paired and alternate
// which goes first; the ratio reported is the median of the per-round
// ratios.
//
//	go run ./bench/workload -pinfold ./pinfold -rounds 10
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
	"sort"
	"time"
)

func main() {
	pinfold := flag.String("pinfold", "./pinfold", "pinfold binary to measure")
	rounds := flag.Int("rounds", 10, "paired rounds")
	files := flag.Int("files", 10000, "files in the archive")
	flag.Parse()
	bin, err := filepath.Abs(*pinfold)
	check(err)
	dir, err := os.MkdirTemp("", "pinfold-workload-")
	check(err)
	defer os.RemoveAll(dir)
	store := filepath.Join(dir, "store")
	archive := filepath.Join(dir, "files.tar")
	check(makeArchive(archive, *files))

	run := func(access string) time.Duration {
		ws := filepath.Join(dir, "ws-"+access)
		os.RemoveAll(ws)
		check(os.MkdirAll(ws, 0o755))
		cmd := exec.Command(bin, "run", "--access", access, "--mount", archive+":/archive.tar:ro", "--",
			"tar", "xf", "/archive.tar")
		cmd.Dir = ws
		cmd.Env = append(os.Environ(), "PINFOLD_STORE="+store)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		if err := cmd.Run(); err != nil {
			fail(fmt.Errorf("%s: %v: %s", access, err, out.String()))
		}
		d := time.Since(start)
		if access == "changeset" {
			// Keep the store small between rounds (not timed).
			disc := exec.Command(bin, "discard")
			disc.Dir, disc.Env = ws, cmd.Env
			if b, err := disc.CombinedOutput(); err != nil {
				fail(fmt.Errorf("discard: %v: %s", err, b))
			}
		}
		return d
	}
	run("rw")
	run("changeset") // warm the page cache and the store
	var rw, cs []time.Duration
	var ratios []float64
	for i := 0; i < *rounds; i++ {
		var a, b time.Duration
		if i%2 == 0 {
			a = run("changeset")
			b = run("rw")
		} else {
			b = run("rw")
			a = run("changeset")
		}
		cs, rw = append(cs, a), append(rw, b)
		ratios = append(ratios, float64(a)/float64(b))
	}
	sort.Float64s(ratios)
	fmt.Printf("unpacking %d files (%d rounds)\n", *files, *rounds)
	fmt.Printf("  %-44s %8.0f ms\n", "pinfold run --access changeset -- tar xf", ms(median(cs)))
	fmt.Printf("  %-44s %8.0f ms\n", "pinfold run --access rw -- tar xf", ms(median(rw)))
	fmt.Printf("  ratio changeset / rw: median %.3f (min %.3f, max %.3f)\n", ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1])
}

// makeArchive writes n small text files in 100 directories.
func makeArchive(path string, n int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 4096)
	for i := 0; i < n; i++ {
		if i%100 == 0 {
			if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("d%03d/", i/100), Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
				return err
			}
		}
		size := 200 + rng.IntN(3800)
		for j := 0; j < size; j++ {
			buf[j] = byte('a' + rng.IntN(26))
		}
		h := &tar.Header{Name: fmt.Sprintf("d%03d/f%05d.txt", i/100, i), Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(size)}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(buf[:size]); err != nil {
			return err
		}
	}
	return tw.Close()
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func check(err error) {
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "workload:", err)
	os.Exit(1)
}
