package changeset

import (
	"fmt"
	"io/fs"
	"path"
	"strconv"

	"golang.org/x/sys/unix"
)

// stateOf is the fingerprint of a path's current stat (nil: absent).
func stateOf(st *Stat) FileState {
	if st == nil {
		return FileState{Absent: true}
	}
	s := FileState{Mode: uint32(st.Mode), Ino: st.Ino}
	if !st.Mode.IsDir() {
		s.Size = st.Size
		s.MTime = st.ModTime.UnixNano()
		s.CTime = st.ChangeTime.UnixNano()
	}
	return s
}

// Fingerprint records the state of the original of every entry as [Scan]
// saw it (an entry's Old; an added one had none), which is why it must be
// taken right after the run's scan; [Conflicts] compares with it later.
// Only an entry that lacks both is looked up again: a run that added
// 10,000 files costs no system call here. With imply, an added path below
// one whose original was absent is left out: its original was absent too,
// which [Conflicts] infers (10,000 files unpacked into a new directory
// keep one fingerprint, not 10,000). Fingerprints merged with older ones
// (a rerun into a changeset) must not imply: an older fingerprint of the
// directory would hide that what is below it was absent.
func Fingerprint(roots []Root, entries []Entry, imply bool) (Fingerprints, error) {
	fp := make(Fingerprints)
	implied := make(map[string]bool) // directories absent below an absent one
	var kb []byte                    // a key, for look-ups that do not allocate
	for i := range entries {
		e := &entries[i]
		if e.Root < 0 || e.Root >= len(roots) {
			return nil, fmt.Errorf("entry %q: no root %d", e.Path, e.Root)
		}
		st := e.Old
		if imply && st == nil && e.Kind == Added {
			if d := path.Dir(e.Path); d != "." {
				kb = append(append(strconv.AppendInt(kb[:0], int64(e.Root), 10), 0), d...)
				if implied[string(kb)] || fp[string(kb)].Absent {
					if e.IsDir() {
						implied[FingerprintKey(e.Root, e.Path)] = true
					}
					continue
				}
			}
		}
		key := FingerprintKey(e.Root, e.Path)
		if st == nil && e.Kind != Added {
			var err error
			if st, err = statIn(roots[e.Root].Lower, e.Path); err != nil {
				return nil, fmt.Errorf("fingerprinting %s: %w", e.Path, err)
			}
		}
		fp[key] = stateOf(st)
	}
	return fp, nil
}

// impliedAbsent tells whether the nearest fingerprinted directory above
// path was absent: its original was then absent too (see [Fingerprint]).
func impliedAbsent(fp Fingerprints, root int, p string) bool {
	for d := path.Dir(p); d != "." && d != "/" && d != ""; d = path.Dir(d) {
		if v, ok := fp[FingerprintKey(root, d)]; ok {
			return v.Absent
		}
	}
	return false
}

// Conflicts lists the entries whose original changed since fp was taken.
// A path that already holds the changeset's version (a partial apply) is
// not a conflict. A directory the changeset deletes conflicts when it now
// holds names the changeset does not delete. Entries without a
// fingerprint are not checked, but for those below a directory whose
// original was absent, which were absent too.
func Conflicts(roots []Root, entries []Entry, fp Fingerprints) []Conflict {
	var out []Conflict
	// Paths found absent now: what is below them is absent too, and
	// needs no look-up (an apply of 10,000 new files in one new
	// directory looks up one).
	absentNow := make(map[string]bool)
	deleted := make(map[string]bool)
	for i := range entries {
		if entries[i].Kind == Deleted || entries[i].TypeChanged() {
			deleted[FingerprintKey(entries[i].Root, entries[i].Path)] = true
		}
	}
	for i := range entries {
		e := &entries[i]
		if e.Root < 0 || e.Root >= len(roots) {
			continue
		}
		key := FingerprintKey(e.Root, e.Path)
		want, ok := fp[key]
		if !ok {
			if !impliedAbsent(fp, e.Root, e.Path) {
				continue
			}
			want = FileState{Absent: true}
		}
		var now *Stat
		if !absentNow[FingerprintKey(e.Root, pathDir(e.Path))] {
			var err error
			if now, err = statIn(roots[e.Root].Lower, e.Path); err != nil {
				out = append(out, Conflict{e.Root, e.Path, WhyChanged})
				continue
			}
		}
		if now == nil {
			absentNow[key] = true
		}
		cur := stateOf(now)
		if cur != want && !holdsNew(roots[e.Root], e, now) {
			why := WhyChanged
			switch {
			case want.Absent:
				why = WhyCreated
			case cur.Absent:
				why = WhyDeleted
			}
			out = append(out, Conflict{e.Root, e.Path, why})
			continue
		}
		// A directory to delete that holds something new.
		if now != nil && now.Mode.IsDir() && e.Old != nil && e.Old.Mode.IsDir() && (e.New == nil || !e.New.Mode.IsDir()) {
			names, err := listDirIn(roots[e.Root].Lower, e.Path)
			if err != nil {
				out = append(out, Conflict{e.Root, e.Path, WhyChanged})
				continue
			}
			for _, n := range names {
				if !deleted[FingerprintKey(e.Root, join(e.Path, n))] {
					out = append(out, Conflict{e.Root, join(e.Path, n), WhyCreated})
				}
			}
		}
	}
	return out
}

// holdsNew tells whether now, the current state of e's original, already
// is the changeset's version.
func holdsNew(r Root, e *Entry, now *Stat) bool {
	n := e.New
	switch {
	case n == nil || now == nil:
		return n == nil && now == nil
	case n.Mode.Type() != now.Mode.Type():
		return false
	case n.Mode.IsDir():
		return AppliedMode(n.Mode) == now.Mode
	case n.Mode&fs.ModeSymlink != 0:
		return n.Link == now.Link
	case n.Mode.IsRegular():
		if AppliedMode(n.Mode) != now.Mode || n.Size != now.Size {
			return false
		}
		eq, err := sameContent(r.Upper, e.Path, r.Lower, e.Path, make([]byte, 32<<10), make([]byte, 32<<10))
		return err == nil && eq
	}
	return false
}

// listDirIn lists the names in the directory rel below root, reached
// without following a link.
func listDirIn(root, rel string) ([]string, error) {
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	fd, err := openBeneath(rfd, rel, unix.O_RDONLY|unix.O_DIRECTORY)
	unix.Close(rfd)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return readNames(fd)
}

// pathDir is the directory of an entry's path, "" for a top-level one
// (whose directory, the root, always exists).
func pathDir(p string) string {
	if d := path.Dir(p); d != "." {
		return d
	}
	return "\x00"
}
