package main

// The lookup benchmark: finding a base and image in a store of many.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/pinfold/pinfold/internal/store"
	"golang.org/x/sys/unix"
)

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
