package main

// The import benchmark: a tarball base unpacked into the store against
// tar itself.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strings"
	"time"

	"github.com/pinfold/pinfold/internal/store"
	"golang.org/x/sys/unix"
)

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
	sides, hash := importSides(tarball, shift)

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

	printImport(all, sides, hash, rounds, cpuprofile)
}

// importSides are the import benchmark's sides: pinfold's Store.TarBase
// and tar -xf with and without --numeric-owner; and the hash of the
// tarball, for context.
func importSides(tarball string, shift uint32) ([]*side, *side) {
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

	return sides, hash
}

// printImport prints the import benchmark's table and ratios.
func printImport(all, sides []*side, hash *side, rounds int, cpuprofile string) {
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
