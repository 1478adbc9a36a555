// Package changeset reads, reviews, applies and exports the writes a
// sandboxed command made to the workspace.
//
// A sandboxed command sees the workspace through an overlay: the real
// directory is the read-only lower layer and every write lands in an upper
// directory in pinfold's store. A changeset is that upper directory (one per
// captured root) plus metadata ([Meta]). [Scan] turns the upper directories
// into a sorted list of [Entry] values, one per changed path, comparing each
// with the original so that a copy-up without a change (a file opened for
// writing and closed, a chown) is not reported. The list is data: callers
// print it ([WriteDiff], [WriteStat], [WriteNameStatus], [WriteJSON]), apply
// it ([Apply], journaled, atomic per file, refusing on conflicts), or export
// it as an OCI image layer ([Export]).
//
// How the overlay records a change in an upper directory:
//
//   - a new or changed file, symlink or directory is a full copy;
//   - a deleted entry is a whiteout: a character device 0/0, or an empty
//     regular file carrying the xattr user.overlay.whiteout (or
//     trusted.overlay.whiteout);
//   - a directory that replaced the original is opaque: the xattr
//     user.overlay.opaque (or trusted.overlay.opaque) is "y"; the original's
//     contents are then hidden.
//
// Scan expands deleted and opaque directories into one entry per path, like
// git, so an `rm -rf d` lists every file of d as deleted.
//
// Directories appear in the entries (an added empty directory is a change
// that Apply makes), but the text formats leave them out, as git does.
// Ownership is not part of a change: inside the sandbox owners are mapped,
// and Apply gives created files the owner the caller asks for.
package changeset

import (
	"errors"
	"io/fs"
	"time"
)

// Root is one captured directory: the original (Lower, a host path) and
// its upper directory. Lower should be a resolved path: Apply refuses a
// Lower whose last component is a symbolic link.
type Root struct {
	Lower, Upper string
}

// Kind says what happened to a path.
type Kind string

// The kinds of change.
const (
	Added    Kind = "added"
	Modified Kind = "modified"
	Deleted  Kind = "deleted"
)

// Entry is one changed path.
type Entry struct {
	Root   int    // index into the roots
	Path   string // relative to the root, "/"-separated, raw bytes (names may not be UTF-8)
	Kind   Kind
	Old    *Stat // the original (nil when added)
	New    *Stat // the changed version (nil when deleted)
	Opaque bool  // a directory that replaced the original's contents
}

// TypeChanged tells whether a modified entry changed the type of its path
// (a file that became a symlink or a directory, ...).
func (e *Entry) TypeChanged() bool {
	return e.Old != nil && e.New != nil && e.Old.Mode.Type() != e.New.Mode.Type()
}

// IsDir tells whether the entry is a directory on the side that exists
// now (New, else Old).
func (e *Entry) IsDir() bool {
	s := e.New
	if s == nil {
		s = e.Old
	}
	return s != nil && s.Mode.IsDir()
}

// Stat is what a changeset records about one version of a path.
type Stat struct {
	Mode       fs.FileMode
	Size       int64
	Link       string // symlink target
	UID, GID   uint32
	ModTime    time.Time
	Ino, Dev   uint64
	Nlink      uint32
	Rdev       uint64 // device number of a device node
	ChangeTime time.Time
}

// Counts sums up a list of entries.
type Counts struct {
	Added    int `json:"added"`
	Modified int `json:"modified"`
	Deleted  int `json:"deleted"`
}

// Count counts the entries a person would count: every path that is not a
// directory, plus directories that are changes in their own right (an
// added or deleted directory with no entries below it, a directory whose
// mode changed). Entries must be sorted as [Scan] returns them.
func Count(entries []Entry) Counts {
	var c Counts
	for i := range entries {
		if !shown(entries, i) {
			continue
		}
		switch entries[i].Kind {
		case Added:
			c.Added++
		case Modified:
			c.Modified++
		case Deleted:
			c.Deleted++
		}
	}
	return c
}

// shown tells whether entries[i] counts as a change of its own.
func shown(entries []Entry, i int) bool {
	e := &entries[i]
	if !e.IsDir() {
		return true
	}
	if e.Kind == Modified {
		return e.TypeChanged() || e.Old.Mode != e.New.Mode
	}
	// An added or deleted directory counts when nothing below it does.
	if i+1 < len(entries) {
		n := &entries[i+1]
		if n.Root == e.Root && len(n.Path) > len(e.Path) && n.Path[len(e.Path)] == '/' && n.Path[:len(e.Path)] == e.Path {
			return false
		}
	}
	return true
}

// Errors callers branch on.
var (
	// ErrConflict: the original changed since the run; see [ConflictError].
	ErrConflict = errors.New("the original changed since the run")
	// ErrUnsafe: the changeset holds something Apply refuses to write
	// (a device, fifo or socket, a path escaping its root, a symlink in
	// the way).
	ErrUnsafe = errors.New("unsafe change")
	// ErrNotFound: no changeset matches.
	ErrNotFound = errors.New("no such changeset")
	// ErrAmbiguous: a prefix matches more than one changeset.
	ErrAmbiguous = errors.New("ambiguous changeset prefix")
	// ErrBusy: another process holds the changeset's lock.
	ErrBusy = errors.New("changeset is in use")
	// ErrUnsupported: the operation needs Linux.
	ErrUnsupported = errors.New("changesets need Linux")
)
