package changeset

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"slices"
	"sort"
	"sync"

	"golang.org/x/sys/unix"
)

// Scan compares each root's upper directory with its original and returns
// the changes, sorted by root then path. Deleted and opaque directories are
// expanded into one entry per path. A path copied up without a change of
// content, mode, symlink target or type is not reported.
func Scan(ctx context.Context, roots []Root) ([]Entry, error) { return scanRoots(ctx, roots, false) }

// ScanTypes is Scan for counting and fingerprinting, as the end of a run
// does: below a directory the original lacks, an entry's New holds only
// its file type, from the directory listing, not a stat of it (a run that
// unpacked 10,000 files saves 10,000 system calls).
func ScanTypes(ctx context.Context, roots []Root) ([]Entry, error) {
	return scanRoots(ctx, roots, true)
}

func scanRoots(ctx context.Context, roots []Root, light bool) ([]Entry, error) {
	var parts [][]Entry
	n := 0
	for i, r := range roots {
		t := &scan{ctx: ctx, sem: make(chan struct{}, 2*runtime.GOMAXPROCS(0)), light: light}
		s := &scanner{t: t, root: i, r: r}
		if err := s.run(); err != nil {
			return nil, fmt.Errorf("scanning changes of %s: %w", r.Lower, err)
		}
		for _, p := range t.parts {
			parts = append(parts, p.out)
			n += len(p.out)
		}
	}
	out := make([]Entry, 0, n)
	for _, p := range parts {
		out = append(out, p...)
	}
	slices.SortFunc(out, func(a, b Entry) int {
		if c := cmp.Compare(a.Root, b.Root); c != 0 {
			return c
		}
		return cmp.Compare(a.Path, b.Path)
	})
	return out, nil
}

// scan is the state the scanners of one root share: directories are
// scanned on other goroutines while a slot of sem is free.
type scan struct {
	ctx   context.Context
	light bool // see ScanTypes
	sem   chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	parts []*scanner // every scanner, each with its own entries
	err   error
	bufs  [][]byte // readPaths buffers of finished scanners
}

// buf returns a buffer for readPaths: one per goroutine at a time.
func (t *scan) buf() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.bufs); n > 0 {
		b := t.bufs[n-1]
		t.bufs = t.bufs[:n-1]
		return b
	}
	return make([]byte, 8<<10)
}

func (t *scan) putBuf(s *scanner) {
	if s.dbuf == nil {
		return
	}
	t.mu.Lock()
	t.bufs = append(t.bufs, s.dbuf)
	s.dbuf = nil
	t.mu.Unlock()
}

func (t *scan) fail(err error) {
	t.mu.Lock()
	if t.err == nil {
		t.err = err
	}
	t.mu.Unlock()
}

type scanner struct {
	t     *scan
	root  int
	r     Root
	out   []Entry
	stats []Stat // allocated in blocks, for fewer and denser allocations
	dbuf  []byte // readPaths's buffer
	same  []int  // indexes into out of modified files whose contents must be compared
}

func (s *scanner) run() error {
	ufd, err := openDir(unix.AT_FDCWD, s.r.Upper)
	if err != nil {
		return fmt.Errorf("opening upper directory: %w", err)
	}
	defer unix.Close(ufd)
	lfd, err := openDir(unix.AT_FDCWD, s.r.Lower)
	if err != nil {
		if !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("opening original: %w", err)
		}
		lfd = -1
	}
	if lfd >= 0 {
		defer unix.Close(lfd)
	}
	s.t.parts = append(s.t.parts, s)
	err = s.dir("", ufd, lfd, false)
	s.t.wg.Wait()
	if err == nil {
		err = s.t.err
	}
	if err != nil {
		return err
	}
	for _, p := range s.t.parts {
		if err := p.compareContents(); err != nil {
			return err
		}
	}
	return nil
}

// sub scans the directory rel (open as ufd and lfd, which it closes) on
// another goroutine when one is free, else here.
func (s *scanner) sub(rel string, ufd, lfd int, opaque bool) error {
	select {
	case s.t.sem <- struct{}{}:
	default:
		err := s.dir(rel, ufd, lfd, opaque)
		closeDirs(ufd, lfd)
		return err
	}
	c := &scanner{t: s.t, root: s.root, r: s.r}
	s.t.mu.Lock()
	s.t.parts = append(s.t.parts, c)
	s.t.mu.Unlock()
	s.t.wg.Add(1)
	go func() {
		defer s.t.wg.Done()
		err := c.dir(rel, ufd, lfd, opaque)
		closeDirs(ufd, lfd)
		s.t.putBuf(c)
		<-s.t.sem
		if err != nil {
			s.t.fail(err)
		}
	}()
	return nil
}

func closeDirs(ufd, lfd int) {
	unix.Close(ufd)
	if lfd >= 0 {
		unix.Close(lfd)
	}
}

// openDir opens a directory without following a final symlink.
func openDir(dirfd int, name string) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		return fd, err
	}
}

// readPaths lists a directory open as fd as the paths rel/name, sorted:
// one string per entry, its name a suffix of it. With withTypes, it also
// returns each one's d_type, in the same order.
func (s *scanner) readPaths(fd int, rel string, withTypes bool) ([]string, []byte, error) {
	if s.dbuf == nil {
		s.dbuf = s.t.buf()
	}
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		return nil, nil, err
	}
	var out []string
	var types []byte
	prefix := rel
	if rel != "" {
		prefix += "/"
	}
	for {
		n, err := unix.Getdents(fd, s.dbuf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		if n <= 0 {
			break
		}
		// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
		for b := s.dbuf[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return nil, nil, errors.New("malformed directory entry")
			}
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if !(len(name) == 1 && name[0] == '.') && !(len(name) == 2 && name[0] == '.' && name[1] == '.') {
				out = append(out, prefix+string(name))
				if withTypes {
					types = append(types, b[18])
				}
			}
			b = b[reclen:]
		}
	}
	if withTypes {
		sort.Sort(typedPaths{out, types})
	} else {
		slices.Sort(out)
	}
	return out, types, nil
}

// typedPaths sorts paths with their types.
type typedPaths struct {
	p []string
	t []byte
}

func (x typedPaths) Len() int           { return len(x.p) }
func (x typedPaths) Less(i, j int) bool { return x.p[i] < x.p[j] }
func (x typedPaths) Swap(i, j int) {
	x.p[i], x.p[j] = x.p[j], x.p[i]
	x.t[i], x.t[j] = x.t[j], x.t[i]
}

// typeStat is a Stat that holds only a file type, for ScanTypes: nil
// when the type is one that needs a stat (a device may be a whiteout).
func (s *scanner) typeStat(t byte) *Stat {
	var m fs.FileMode
	switch t {
	case unix.DT_REG:
	case unix.DT_DIR:
		m = fs.ModeDir
	case unix.DT_LNK:
		m = fs.ModeSymlink
	default:
		return nil
	}
	if len(s.stats) == cap(s.stats) {
		s.stats = make([]Stat, 0, min(max(16, 2*cap(s.stats)), 256))
	}
	// Size -1: unknown, and never taken for a whiteout (an empty file with
	// an xattr), which a directory the original lacks cannot hold.
	s.stats = append(s.stats, Stat{Mode: m, Size: -1})
	return &s.stats[len(s.stats)-1]
}

// nameLen is the length of the last name of p, a path below rel.
func nameLen(p, rel string) int {
	if rel == "" {
		return len(p)
	}
	return len(p) - len(rel) - 1
}

// readNames lists a directory open as fd, sorted.
func readNames(fd int) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}

func (s *scanner) add(e Entry) {
	e.Root = s.root
	if len(s.out) == cap(s.out) {
		// Double: append grows large slices by a quarter, which
		// allocates several times the final size on big changesets.
		s.out = slices.Grow(s.out, max(64, len(s.out)))
	}
	s.out = append(s.out, e)
}

// stat is statAt with the result kept in s's blocks.
func (s *scanner) stat(dirfd int, name string) (*Stat, error) {
	var st unix.Stat_t
	ok, err := fstatat(dirfd, name, &st)
	if !ok || err != nil {
		return nil, err
	}
	if len(s.stats) == cap(s.stats) {
		s.stats = make([]Stat, 0, min(max(16, 2*cap(s.stats)), 256))
	}
	s.stats = append(s.stats, statOf(&st))
	r := &s.stats[len(s.stats)-1]
	if r.Mode&fs.ModeSymlink != 0 {
		if r.Link, err = readlinkAt(dirfd, name); err != nil {
			return nil, err
		}
		r.Size = int64(len(r.Link))
	}
	return r, nil
}

// dir compares the upper directory rel (open as ufd) with the original
// (lfd, or -1 when there is none). opaque says that the upper directory
// replaces the original: names of the original that the upper does not
// hold are gone.
func (s *scanner) dir(rel string, ufd, lfd int, opaque bool) error {
	if err := s.t.ctx.Err(); err != nil {
		return err
	}
	light := s.t.light && lfd < 0
	paths, types, err := s.readPaths(ufd, rel, light)
	if err != nil {
		return fmt.Errorf("reading %s: %w", s.upperPath(rel), err)
	}
	for i, p := range paths {
		name := p[len(p)-nameLen(p, rel):]
		var u *Stat
		if light {
			u = s.typeStat(types[i])
		}
		if u == nil {
			if u, err = s.stat(ufd, name); err != nil {
				return fmt.Errorf("stat %s: %w", s.upperPath(p), err)
			}
		}
		if u == nil {
			continue // removed while scanning
		}
		var l *Stat
		if lfd >= 0 {
			if l, err = s.stat(lfd, name); err != nil {
				return fmt.Errorf("stat %s: %w", s.lowerPath(p), err)
			}
		}
		if s.isWhiteout(u, p) {
			if l != nil {
				s.add(Entry{Path: p, Kind: Deleted, Old: l})
				if l.Mode.IsDir() {
					if err := s.deletedDir(p, lfd, name); err != nil {
						return err
					}
				}
			}
			continue
		}
		if !u.Mode.IsDir() {
			err = s.file(p, lfd, name, u, l)
		} else {
			err = s.subdir(p, ufd, lfd, name, u, l, opaque)
		}
		if err != nil {
			return err
		}
	}
	if !opaque || lfd < 0 {
		return nil
	}
	return s.hidden(rel, lfd, paths)
}

// file adds the entry of p, not a directory in the upper directory
// (stat u), against the original's l (nil: none).
func (s *scanner) file(p string, lfd int, name string, u, l *Stat) error {
	switch {
	case l == nil:
		s.add(Entry{Path: p, Kind: Added, New: u})
	case l.Mode.IsDir():
		s.add(Entry{Path: p, Kind: Modified, Old: l, New: u})
		return s.deletedDir(p, lfd, name)
	case !sameMode(l.Mode, u.Mode) || l.Link != u.Link || l.Rdev != u.Rdev ||
		(l.Mode.IsRegular() && l.Size != u.Size):
		s.add(Entry{Path: p, Kind: Modified, Old: l, New: u})
	case l.Mode.IsRegular() && l.Size > 0:
		s.add(Entry{Path: p, Kind: Modified, Old: l, New: u})
		s.same = append(s.same, len(s.out)-1)
	}
	return nil
}

// subdir adds the entry of the upper directory p (stat u) against the
// original's l, and scans below it (opaque when p or a parent is).
func (s *scanner) subdir(p string, ufd, lfd int, name string, u, l *Stat, opaque bool) error {
	cu, err := openDir(ufd, name)
	if err != nil {
		return fmt.Errorf("opening %s: %w", s.upperPath(p), err)
	}
	cl := -1
	childOpaque := false
	switch {
	case l == nil:
		s.add(Entry{Path: p, Kind: Added, New: u})
	case !l.Mode.IsDir():
		s.add(Entry{Path: p, Kind: Modified, Old: l, New: u})
	default:
		childOpaque = opaque || s.isOpaque(p)
		if childOpaque || !sameMode(l.Mode, u.Mode) {
			s.add(Entry{Path: p, Kind: Modified, Old: l, New: u, Opaque: childOpaque})
		}
		if cl, err = openDir(lfd, name); err != nil {
			unix.Close(cu)
			return fmt.Errorf("opening %s: %w", s.lowerPath(p), err)
		}
	}
	return s.sub(p, cu, cl, childOpaque)
}

// hidden adds as deleted the original's names in the opaque directory
// rel that the upper directory (paths, sorted) does not hold.
func (s *scanner) hidden(rel string, lfd int, paths []string) error {
	lpaths, _, err := s.readPaths(lfd, rel, false)
	if err != nil {
		return fmt.Errorf("reading %s: %w", s.lowerPath(rel), err)
	}
	for _, p := range lpaths {
		if _, ok := slices.BinarySearch(paths, p); ok {
			continue
		}
		name := p[len(p)-nameLen(p, rel):]
		l, err := s.stat(lfd, name)
		if err != nil {
			return fmt.Errorf("stat %s: %w", s.lowerPath(p), err)
		}
		if l == nil {
			continue
		}
		s.add(Entry{Path: p, Kind: Deleted, Old: l})
		if l.Mode.IsDir() {
			if err := s.deletedDir(p, lfd, name); err != nil {
				return err
			}
		}
	}
	return nil
}

// deletedDir lists everything below the original directory rel (name in
// the directory parentfd) as deleted.
func (s *scanner) deletedDir(rel string, parentfd int, name string) error {
	if err := s.t.ctx.Err(); err != nil {
		return err
	}
	fd, err := openDir(parentfd, name)
	if err != nil {
		return fmt.Errorf("opening %s: %w", s.lowerPath(rel), err)
	}
	defer unix.Close(fd)
	names, err := readNames(fd)
	if err != nil {
		return fmt.Errorf("reading %s: %w", s.lowerPath(rel), err)
	}
	for _, n := range names {
		p := join(rel, n)
		l, err := s.stat(fd, n)
		if err != nil {
			return fmt.Errorf("stat %s: %w", s.lowerPath(p), err)
		}
		if l == nil {
			continue
		}
		s.add(Entry{Path: p, Kind: Deleted, Old: l})
		if l.Mode.IsDir() {
			if err := s.deletedDir(p, fd, n); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *scanner) upperPath(rel string) string { return join(s.r.Upper, rel) }
func (s *scanner) lowerPath(rel string) string { return join(s.r.Lower, rel) }

// isWhiteout tells whether the upper entry u at rel marks a deletion.
func (s *scanner) isWhiteout(u *Stat, rel string) bool {
	if u.Mode&fs.ModeCharDevice != 0 && u.Rdev == 0 {
		return true
	}
	return u.Mode.IsRegular() && u.Size == 0 && upperWhiteout(s.upperPath(rel), u)
}

// isOpaque tells whether the upper directory rel replaces the original.
func (s *scanner) isOpaque(rel string) bool {
	p := s.upperPath(rel)
	return xattrIs(p, "user.overlay.opaque", "y") || xattrIs(p, "trusted.overlay.opaque", "y")
}

func hasXattr(path, name string) bool {
	_, err := unix.Lgetxattr(path, name, nil)
	return err == nil
}

func xattrIs(path, name, want string) bool {
	var buf [8]byte
	n, err := unix.Lgetxattr(path, name, buf[:])
	return err == nil && string(buf[:n]) == want
}

// compareContents drops the modified files of s.same whose contents equal
// the original's, comparing several files at a time.
func (s *scanner) compareContents() error {
	if len(s.same) == 0 {
		return nil
	}
	drop := make([]bool, len(s.same))
	errs := make([]error, len(s.same))
	workers := min(len(s.same), max(4, 2*runtime.GOMAXPROCS(0)))
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := make([]byte, 64<<10)
			b := make([]byte, 64<<10)
			for k := range next {
				p := s.out[s.same[k]].Path
				eq, err := sameContent(s.r.Lower, p, s.r.Upper, p, a, b)
				drop[k], errs[k] = eq, err
			}
		}()
	}
	for k := range s.same {
		if s.t.ctx.Err() != nil {
			break
		}
		next <- k
	}
	close(next)
	wg.Wait()
	if err := s.t.ctx.Err(); err != nil {
		return err
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	dropped := make(map[int]bool)
	for k, d := range drop {
		if d {
			dropped[s.same[k]] = true
		}
	}
	if len(dropped) == 0 {
		return nil
	}
	kept := s.out[:0]
	for i, e := range s.out {
		if !dropped[i] {
			kept = append(kept, e)
		}
	}
	s.out = kept
	return nil
}

// sameMode reports whether an original of mode l already holds what
// Apply writes for mode u: Apply never writes set-id bits, so an upper
// that differs from its original only by them (a partial apply wrote it
// without them, or the command only set them) changes nothing.
func sameMode(l, u fs.FileMode) bool { return l == u || l == AppliedMode(u) }
