package capability

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// ErrLimit reports that FromELF stopped at one of its bounds; the
// findings it returns with it are those of the part it scanned.
var ErrLimit = errors.New("scan limit reached")

// envDirs are the workspace's environments: the ones installers fill
// with shared objects.
var envDirs = [...]string{".venv", "node_modules", "target"}

// skipDirs hold no shared objects worth scanning (Python bytecode, Cargo's
// incremental and fingerprint state) but can hold many files.
var skipDirs = [...]string{".cache", ".fingerprint", ".git", "__pycache__", "incremental"}

// Bounds of one scan, so that a huge node_modules or a hostile file cannot
// make inference slow or greedy.
type bounds struct {
	entries int   // directory entries visited
	objects int   // files opened to check for ELF
	read    int64 // bytes read from one ELF file
}

var defaultBounds = bounds{entries: 500_000, objects: 20_000, read: 16 << 20}

// FromELF reads the DT_NEEDED entries of the ELF executables and shared
// objects in dir's environments (.venv, node_modules, target) and returns
// one finding per needed soname that neither the base (provided) nor the
// workspace itself (a bundled library such as numpy.libs/...) provides.
// A soname no capability provides gives a finding with Capability "".
// It skips symlinks and objects for another machine; nil provided means
// the base provides nothing.
func FromELF(ctx context.Context, dir string, provided func(soname string) bool) ([]Finding, error) {
	return scanELF(ctx, dir, provided, defaultBounds)
}

type elfScan struct {
	ctx     context.Context
	dir     string
	limit   bounds
	entries int
	objects int
	machine uint16           // 0 accepts every machine
	have    map[string]bool  // sonames and library file names in the workspace
	needs   map[string]*need // by soname
}

type need struct {
	first string // the first object (in walk order) that needs it
	count int
}

func scanELF(ctx context.Context, dir string, provided func(string) bool, limit bounds) ([]Finding, error) {
	s := &elfScan{
		ctx: ctx, dir: dir, limit: limit, machine: hostMachine(),
		have: map[string]bool{}, needs: map[string]*need{},
	}
	var stop error
	for _, sub := range envDirs {
		root := filepath.Join(dir, sub)
		if st, err := os.Lstat(root); err != nil || !st.IsDir() {
			continue // missing, or a symlink: inference stays inside the workspace
		}
		if err := filepath.WalkDir(root, s.visit); err != nil {
			stop = err
			break
		}
	}
	if stop != nil && !errors.Is(stop, ErrLimit) {
		return nil, fmt.Errorf("scanning shared objects: %w", stop)
	}
	var out []Finding
	for soname, n := range s.needs {
		if s.have[soname] || provided != nil && provided(soname) {
			continue
		}
		c, _ := BySoname(soname)
		ev := n.first + " needs " + soname
		switch {
		case n.count == 2:
			ev += " (and 1 other file)"
		case n.count > 2:
			ev += fmt.Sprintf(" (and %d other files)", n.count-1)
		}
		out = append(out, Finding{Capability: c, Source: ELF, Evidence: ev})
	}
	sortFindings(out)
	if stop != nil {
		return out, fmt.Errorf("scanning shared objects in %s: %w", dir, stop)
	}
	return out, nil
}

func (s *elfScan) visit(path string, d fs.DirEntry, err error) error {
	if err != nil {
		return nil // an unreadable corner of the tree is not the user's problem here
	}
	s.entries++
	if s.entries%1024 == 1 {
		if err := s.ctx.Err(); err != nil {
			return err
		}
	}
	if s.entries > s.limit.entries {
		return fmt.Errorf("%w: more than %d entries", ErrLimit, s.limit.entries)
	}
	name := d.Name()
	if d.IsDir() {
		if slices.Contains(skipDirs[:], name) {
			return fs.SkipDir
		}
		return nil
	}
	lib := strings.HasSuffix(name, ".so") || strings.Contains(name, ".so.")
	if lib {
		s.have[name] = true // symlinks too: libfoo.so.1 -> libfoo.so.1.2.3
	}
	if !d.Type().IsRegular() {
		return nil
	}
	if !lib && !strings.HasSuffix(name, ".node") && (strings.Contains(name, ".") || !executable(d)) {
		return nil
	}
	s.objects++
	if s.objects > s.limit.objects {
		return fmt.Errorf("%w: more than %d files", ErrLimit, s.limit.objects)
	}
	s.inspect(path)
	return nil
}

// inspect records what one file needs and provides; files that are not
// ELF objects for this machine, or that do not parse, are ignored.
func (s *elfScan) inspect(path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	ef, err := readDynamic(&budgetReader{r: f, left: s.limit.read})
	if err != nil {
		return
	}
	if s.machine != 0 && ef.machine != s.machine || ef.typ != etDyn && ef.typ != etExec {
		return
	}
	if ef.soname != "" {
		s.have[ef.soname] = true
	}
	needed := ef.needed
	rel, err := filepath.Rel(s.dir, path)
	if err != nil {
		rel = path
	}
	rel = filepath.ToSlash(rel)
	for _, so := range needed {
		if n := s.needs[so]; n != nil {
			n.count++
		} else {
			s.needs[so] = &need{first: rel, count: 1}
		}
	}
}

func executable(d fs.DirEntry) bool {
	info, err := d.Info()
	return err == nil && info.Mode()&0o111 != 0
}

// budgetReader fails reads beyond a total, which bounds what debug/elf
// can be made to read (and allocate) for one file.
type budgetReader struct {
	r    io.ReaderAt
	left int64
}

func (b *budgetReader) ReadAt(p []byte, off int64) (int, error) {
	if int64(len(p)) > b.left {
		return 0, errors.New("ELF file reads past the scan's budget")
	}
	b.left -= int64(len(p))
	return b.r.ReadAt(p, off)
}

// hostMachine is the ELF machine (e_machine) of the objects a sandbox on
// this host can load; 0 accepts every machine.
func hostMachine() uint16 {
	switch runtime.GOARCH {
	case "amd64":
		return 62
	case "arm64":
		return 183
	case "386":
		return 3
	case "arm":
		return 40
	case "riscv64":
		return 243
	case "ppc64", "ppc64le":
		return 21
	case "s390x":
		return 22
	case "loong64":
		return 258
	}
	return 0
}
