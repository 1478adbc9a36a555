package changeset

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Apply writes the changes into the original directories.
//
// Before touching anything it checks every entry (no device, fifo or
// socket, no path escaping its root, no symlink among the parents: else
// [ErrUnsafe]) and the conflicts (else a [ConflictError], unless Force),
// then writes <journalDir>/apply.json, the operations in order, with
// fsync. Each file is written aside under a temporary name in its
// directory and renamed over the target, so a target is always either the
// old or the new version. Directories are made parents first; files and
// symlinks follow, then hard links among the changed files, then the
// deletions, children first, and last the directories' modes and times.
// Every parent is opened with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS)
// below the root, and final names are handled without following links.
//
// On a write error (ENOSPC, ...) Apply stops, removes its temporary files
// and returns "applied N of M" wrapping the error; the journal stays so
// that [Recover], or Apply again, finishes. An entry whose original
// already holds the changeset's version counts as skipped, not as a
// conflict, so applying again after a partial apply succeeds.
//
// Like cp, Apply does not fsync the files it writes (only its journal):
// it is atomic against the death of its process, not against a power cut
// before the kernel writes the data back.
func Apply(ctx context.Context, journalDir string, roots []Root, entries []Entry, o ApplyOptions) (ApplyResult, error) {
	var res ApplyResult
	if err := Recover(ctx, journalDir, roots); err != nil {
		return res, fmt.Errorf("finishing an earlier apply: %w", err)
	}
	sel := newSelector(o.Paths, nil, o.Prefix)
	var chosen []Entry
	for i := range entries {
		if sel.match(&entries[i]) {
			chosen = append(chosen, entries[i])
		}
	}
	if len(chosen) == 0 {
		return res, nil
	}
	res.Counts = Count(chosen)
	a, err := openApplier(ctx, roots)
	if err != nil {
		return res, err
	}
	defer a.close()
	if err := a.check(chosen); err != nil {
		return res, err
	}
	if o.Fingerprints != nil {
		res.Conflicts = Conflicts(roots, chosen, o.Fingerprints)
		if len(res.Conflicts) > 0 && !o.Force {
			return res, &ConflictError{Conflicts: res.Conflicts}
		}
	}
	j, skipped, stripped, err := a.plan(roots, chosen, &o)
	if err != nil {
		return res, err
	}
	res.Skipped, res.Stripped = skipped, stripped
	if len(j.Ops) == 0 {
		return res, nil
	}
	if err := writeJournal(journalDir, j); err != nil {
		return res, err
	}
	a.j = j
	err = a.run(journalDir, nil)
	res.Applied = int(a.applied)
	res.Skipped += int(a.left)
	if err != nil {
		return res, fmt.Errorf("applied %d of %d changes: %w", a.applied, j.Total, err)
	}
	return res, a.finish(journalDir)
}

// Recover finishes an apply that was interrupted: it runs the journal's
// operations not recorded as done (all are idempotent), removes leftover
// temporary files and the journal. Without a journal it does nothing.
func Recover(ctx context.Context, journalDir string, roots []Root) error {
	data, err := os.ReadFile(filepath.Join(journalDir, journalName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the apply journal: %w", err)
	}
	j := new(journal)
	if err := json.Unmarshal(data, j); err != nil {
		return fmt.Errorf("reading the apply journal %s: %w", filepath.Join(journalDir, journalName), err)
	}
	if j.Version != 1 || !strings.HasPrefix(j.Tmp, tmpPrefix) || strings.Contains(j.Tmp, "/") {
		return fmt.Errorf("apply journal %s: unknown format", filepath.Join(journalDir, journalName))
	}
	if len(j.Roots) != len(roots) {
		return fmt.Errorf("apply journal %s is for other directories", filepath.Join(journalDir, journalName))
	}
	for i, r := range j.Roots {
		if string(r.Lower) != roots[i].Lower || string(r.Upper) != roots[i].Upper {
			return fmt.Errorf("apply journal %s is for other directories (%s)", filepath.Join(journalDir, journalName), r.Lower)
		}
	}
	for _, o := range j.Ops {
		if o.Root < 0 || o.Root >= len(roots) || !validRel(string(o.Path)) || (o.Kind == opLink && !validRel(string(o.Src))) {
			return fmt.Errorf("apply journal: bad operation %s %q", o.Kind, o.Path)
		}
	}
	a, err := openApplier(ctx, roots)
	if err != nil {
		return err
	}
	defer a.close()
	a.j = j
	done := readProgress(filepath.Join(journalDir, progressName), len(j.Ops))
	if err := a.run(journalDir, done); err != nil {
		return fmt.Errorf("applied %d of %d remaining changes: %w", a.applied, j.Total, err)
	}
	return a.finish(journalDir)
}

// applier carries out operations below open roots.
type applier struct {
	ctx          context.Context
	lower, upper []int // root directory fds
	j            *journal

	mu       sync.Mutex
	dirs     map[dirKey]int
	progress *os.File
	progBuf  []byte // progress records not yet written
	applied  int64  // entries done
	left     int64  // directories left because they are not empty
}

type dirKey struct {
	root int
	dir  string
}

const maxCachedDirs = 4096

func openApplier(ctx context.Context, roots []Root) (*applier, error) {
	a := &applier{ctx: ctx, dirs: make(map[dirKey]int)}
	for _, r := range roots {
		l, err := openDir(unix.AT_FDCWD, r.Lower)
		if err != nil {
			a.close()
			if err == unix.ELOOP {
				return nil, fmt.Errorf("%w: %s is a symbolic link", ErrUnsafe, r.Lower)
			}
			return nil, fmt.Errorf("opening %s: %w", r.Lower, err)
		}
		a.lower = append(a.lower, l)
		u, err := openDir(unix.AT_FDCWD, r.Upper)
		if err != nil {
			a.close()
			return nil, fmt.Errorf("opening %s: %w", r.Upper, err)
		}
		a.upper = append(a.upper, u)
	}
	return a, nil
}

func (a *applier) close() {
	for _, fd := range a.lower {
		unix.Close(fd)
	}
	for _, fd := range a.upper {
		unix.Close(fd)
	}
	for _, fd := range a.dirs {
		unix.Close(fd)
	}
	a.lower, a.upper, a.dirs = nil, nil, nil
	if a.progress != nil {
		a.progress.Close()
		a.progress = nil
	}
}

// openBeneath opens rel below dirfd, refusing symlinks and escapes.
func openBeneath(dirfd int, rel string, flags int) (int, error) {
	how := unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	for tries := 0; ; tries++ {
		fd, err := unix.Openat2(dirfd, rel, &how)
		switch {
		case err == unix.EINTR || (err == unix.EAGAIN && tries < 100):
			continue
		case err == unix.ENOSYS:
			return openWalk(dirfd, rel, flags)
		}
		return fd, err
	}
}

// openWalk is openBeneath for kernels without openat2: one name at a time.
func openWalk(dirfd int, rel string, flags int) (int, error) {
	if !validRel(rel) {
		return -1, unix.EXDEV
	}
	names := strings.Split(rel, "/")
	cur := dirfd
	for i, n := range names {
		f := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if i == len(names)-1 {
			f = flags | unix.O_NOFOLLOW | unix.O_CLOEXEC
		}
		fd, err := unix.Openat(cur, n, f, 0)
		if cur != dirfd {
			unix.Close(cur)
		}
		if err != nil {
			return -1, err
		}
		cur = fd
	}
	return cur, nil
}

// unsafeErr tells whether an open error means a symlink or escape on the way.
func unsafeErr(err error) bool { return err == unix.ELOOP || err == unix.EXDEV }

// dir returns an fd of the directory rel (a path relative to the root, ""
// for the root), making missing directories when create is set.
func (a *applier) dir(root int, rel string, create bool, owner *Owner) (int, func(), error) {
	if rel == "" {
		return a.lower[root], func() {}, nil
	}
	k := dirKey{root, rel}
	a.mu.Lock()
	fd, ok := a.dirs[k]
	a.mu.Unlock()
	if ok {
		return fd, func() {}, nil
	}
	fd, err := openBeneath(a.lower[root], rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err == unix.ENOENT && create {
		if err = a.mkdirAll(root, rel, owner); err == nil {
			fd, err = openBeneath(a.lower[root], rel, unix.O_RDONLY|unix.O_DIRECTORY)
		}
	}
	if err != nil {
		if unsafeErr(err) {
			return -1, nil, fmt.Errorf("%w: %s: a symbolic link is in the way", ErrUnsafe, quotePath(rel))
		}
		return -1, nil, &fs.PathError{Op: "open", Path: rel, Err: err}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if old, ok := a.dirs[k]; ok {
		unix.Close(fd)
		return old, func() {}, nil
	}
	if len(a.dirs) < maxCachedDirs {
		a.dirs[k] = fd
		return fd, func() {}, nil
	}
	return fd, func() { unix.Close(fd) }, nil
}

// mkdirAll makes the directory rel and its missing parents, mode 0755.
func (a *applier) mkdirAll(root int, rel string, owner *Owner) error {
	parent, name := splitPath(rel)
	pfd, release, err := a.dir(root, parent, true, owner)
	if err != nil {
		return err
	}
	defer release()
	err = unix.Mkdirat(pfd, name, 0o755)
	if err == unix.EEXIST {
		return nil
	}
	if err != nil {
		return err
	}
	if owner != nil {
		return unix.Fchownat(pfd, name, int(owner.UID), int(owner.GID), unix.AT_SYMLINK_NOFOLLOW)
	}
	return nil
}

// check refuses, before anything is written, what Apply must not write.
func (a *applier) check(entries []Entry) error {
	var bad []string
	seen := make(map[dirKey]bool)
	made := make(map[dirKey]bool) // directories the changeset makes
	for i := range entries {
		if e := &entries[i]; e.New != nil && e.New.Mode.IsDir() {
			made[dirKey{e.Root, e.Path}] = true
		}
	}
	replacedByDir := func(root int, p string) bool {
		for ; p != ""; p, _ = splitPath(p) {
			if made[dirKey{root, p}] {
				return true
			}
		}
		return false
	}
	for i := range entries {
		e := &entries[i]
		if e.Root < 0 || e.Root >= len(a.lower) {
			bad = append(bad, fmt.Sprintf("%s: no root %d", quotePath(e.Path), e.Root))
			continue
		}
		if !validRel(e.Path) {
			bad = append(bad, fmt.Sprintf("%s: the path leaves its directory", quotePath(e.Path)))
			continue
		}
		if e.New != nil {
			m := e.New.Mode
			if !m.IsRegular() && !m.IsDir() && m&fs.ModeSymlink == 0 {
				bad = append(bad, fmt.Sprintf("%s: a %s (only files, directories and symlinks are applied)", quotePath(e.Path), specialName(m)))
				continue
			}
			// The upper version must still be what was scanned.
			u, err := statAt(a.upper[e.Root], e.Path)
			if err != nil || u == nil || u.Mode.Type() != m.Type() {
				bad = append(bad, fmt.Sprintf("%s: the changed version is gone or changed type in the changeset", quotePath(e.Path)))
				continue
			}
		}
		parent, _ := splitPath(e.Path)
		k := dirKey{e.Root, parent}
		if parent == "" || seen[k] {
			continue
		}
		seen[k] = true
		fd, err := openBeneath(a.lower[e.Root], parent, unix.O_RDONLY|unix.O_DIRECTORY)
		switch {
		case err == nil:
			unix.Close(fd)
		case err == unix.ENOENT:
		case unsafeErr(err):
			bad = append(bad, fmt.Sprintf("%s: a symbolic link is in the way (%s)", quotePath(e.Path), quotePath(parent)))
		case err == unix.ENOTDIR && (replacedByDir(e.Root, parent) || e.New == nil):
		case err == unix.ENOTDIR:
			bad = append(bad, fmt.Sprintf("%s: %s is no longer a directory", quotePath(e.Path), quotePath(parent)))
		default:
			return fmt.Errorf("checking %s: %w", e.Path, err)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	msg := strings.Join(bad[:min(len(bad), 10)], "; ")
	if len(bad) > 10 {
		msg += fmt.Sprintf("; and %d more", len(bad)-10)
	}
	return fmt.Errorf("%w: refusing to apply: %s", ErrUnsafe, msg)
}

func specialName(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	}
	return "special file"
}

// plan turns the entries into the journal's operations, leaving out
// those whose original already holds the changeset's version.
func (a *applier) plan(roots []Root, entries []Entry, o *ApplyOptions) (*journal, int, []string, error) {
	j := &journal{Version: 1, Tmp: fmt.Sprintf("%s%016x-", tmpPrefix, rand.Uint64())}
	for _, r := range roots {
		j.Roots = append(j.Roots, journalRoot{Lower: []byte(r.Lower), Upper: []byte(r.Upper)})
	}
	root := os.Geteuid() == 0
	skipped := 0
	var stripped []string
	l := newOpLists(entries)
	for i := range entries {
		if err := a.ctx.Err(); err != nil {
			return nil, 0, nil, err
		}
		e := &entries[i]
		now, err := statAt(a.lower[e.Root], e.Path)
		if err != nil {
			return nil, 0, nil, fmt.Errorf("stat %s: %w", join(roots[e.Root].Lower, e.Path), err)
		}
		if !needsApply(roots[e.Root], e, now, o.Fingerprints) {
			skipped++
			continue
		}
		if e.New != nil && Stripped(e.New.Mode) {
			stripped = append(stripped, rootName(roots, e.Root)+e.Path)
		}
		owner := o.Owner
		if owner == nil && root && now != nil {
			owner = &Owner{UID: now.UID, GID: now.GID}
		}
		l.add(e, now, owner, o.Owner)
	}
	j.Ops = l.ops()
	for _, x := range j.Ops {
		if x.Entry {
			j.Total++
		}
	}
	return j, skipped, stripped, nil
}

// inode names a file by device and inode number.
type inode struct{ dev, ino uint64 }

// opLists are a journal's operations by phase, in the order they run:
// what lies in directories replaced by a non-directory (emptied and
// removed first), new directories, files and symbolic links, hard links
// to files written before, removals, then directories' metadata.
type opLists struct {
	pre, mkdirs, writes, links, dels, metas []op
	replaced                                map[dirKey]bool
	firstLink                               map[inode]string // root NUL path of a hard link's first name
}

func newOpLists(entries []Entry) *opLists {
	l := &opLists{replaced: make(map[dirKey]bool), firstLink: make(map[inode]string)}
	for i := range entries {
		e := &entries[i]
		if e.TypeChanged() && e.Old.Mode.IsDir() {
			l.replaced[dirKey{e.Root, e.Path}] = true
		}
	}
	return l
}

// inReplaced reports whether e lies in a directory replaced by a
// non-directory.
func (l *opLists) inReplaced(e *Entry) bool {
	for p := e.Path; ; {
		d, _ := splitPath(p)
		if d == "" {
			return false
		}
		if l.replaced[dirKey{e.Root, d}] {
			return true
		}
		p = d
	}
}

// add plans entry e, whose original is now (nil: none): owner owns what
// it writes, dirOwner the directories it makes.
func (l *opLists) add(e *Entry, now *Stat, owner, dirOwner *Owner) {
	p := []byte(e.Path)
	switch n := e.New; {
	case n == nil:
		k := opRemove
		if e.Old.Mode.IsDir() {
			k = opRmdir
		}
		d := op{Kind: k, Root: e.Root, Path: p, Entry: true}
		if l.inReplaced(e) {
			l.pre = append(l.pre, d)
		} else {
			l.dels = append(l.dels, d)
		}
	case n.Mode.IsDir():
		if now == nil || !now.Mode.IsDir() {
			l.mkdirs = append(l.mkdirs, op{Kind: opMkdir, Root: e.Root, Path: p, Owner: dirOwner})
		}
		l.metas = append(l.metas, op{Kind: opMeta, Root: e.Root, Path: p, Mode: uint32(AppliedMode(n.Mode)), MTime: n.ModTime.UnixNano(), Entry: true})
	case n.Mode&fs.ModeSymlink != 0:
		l.writes = append(l.writes, op{Kind: opSymlink, Root: e.Root, Path: p, Target: []byte(n.Link), MTime: n.ModTime.UnixNano(), Owner: owner, Entry: true})
	default:
		w := op{Kind: opFile, Root: e.Root, Path: p, Mode: uint32(AppliedMode(n.Mode)), MTime: n.ModTime.UnixNano(), Owner: owner, Entry: true}
		if n.Nlink > 1 {
			k := inode{n.Dev, n.Ino}
			if first, ok := l.firstLink[k]; ok && firstLinkRoot(first) == e.Root {
				l.links = append(l.links, op{Kind: opLink, Root: e.Root, Path: p, Src: []byte(firstLinkPath(first)), Entry: true})
				break
			}
			l.firstLink[k] = strconv.Itoa(e.Root) + "\x00" + e.Path
		}
		l.writes = append(l.writes, w)
	}
	if e.TypeChanged() && e.Old.Mode.IsDir() {
		l.pre = append(l.pre, op{Kind: opRmdir, Root: e.Root, Path: p})
	}
}

// ops are the operations in the order they run; removals and metadata
// deepest first.
func (l *opLists) ops() []op {
	byPathDesc := func(x, y op) int {
		if c := cmp.Compare(y.Root, x.Root); c != 0 {
			return c
		}
		return bytes.Compare(y.Path, x.Path)
	}
	slices.SortStableFunc(l.pre, byPathDesc)
	slices.SortStableFunc(l.dels, byPathDesc)
	slices.SortStableFunc(l.metas, byPathDesc)
	var ops []op
	for _, x := range [][]op{l.pre, l.mkdirs, l.writes, l.links, l.dels, l.metas} {
		ops = append(ops, x...)
	}
	return ops
}

// rootName is how a root's paths are shown: nothing for the first (the
// workspace), the directory's path for captured ones.
func rootName(roots []Root, i int) string {
	if i == 0 {
		return ""
	}
	return strings.TrimPrefix(roots[i].Lower, "/") + "/"
}

func firstLinkRoot(k string) int {
	r, _, _ := splitKey(k)
	return r
}

func firstLinkPath(k string) string {
	_, p, _ := splitKey(k)
	return p
}

// needsApply tells whether the original (now) must still change.
func needsApply(r Root, e *Entry, now *Stat, fp Fingerprints) bool {
	if fp != nil && (e.New == nil || !e.New.Mode.IsDir()) {
		if want, ok := fp[FingerprintKey(e.Root, e.Path)]; ok && stateOf(now) == want {
			return true // the original as it was after the run
		}
	}
	return !holdsNew(r, e, now)
}
