package changeset

import (
	"io/fs"
	"path"
	"strings"
)

// ApplyOptions says what Apply writes and how.
type ApplyOptions struct {
	// Paths limits the apply to these paths and what is below them
	// (as DiffOptions.Paths); empty means all.
	Paths []string
	// Prefix, as DiffOptions.Prefix, lets Paths name an entry by its
	// root's prefix and its path, as diff shows it.
	Prefix func(root int) string
	// Force applies despite conflicts.
	Force bool
	// Owner, when set, owns every file, directory and link Apply
	// creates. When nil, a replaced file keeps its owner (when the
	// process may set it) and new ones belong to the process.
	Owner *Owner
	// Fingerprints of the originals taken after the run; nil skips the
	// conflict check.
	Fingerprints Fingerprints
}

// Owner is a user and group id.
type Owner struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// ApplyResult says what Apply did.
type ApplyResult struct {
	Applied int // entries written or removed (directories too)
	// Counts are the changes applied as the changeset's summary counts
	// them (a new directory with its file is one added file).
	Counts    Counts
	Skipped   int        // entries whose original already held the change, or directories left because they hold other files
	Conflicts []Conflict // conflicts found (applied over when Force)
	// Stripped are the entries written without the set-user-id and
	// set-group-id bits the changeset gave them ("root-prefix/path").
	Stripped []string
}

// setID are the mode bits Apply never writes: what a sandboxed command
// writes must not become a set-user-id or set-group-id program on the
// host, owned by the user who applies it (root, often). The sticky bit
// stays: it only restricts who may delete in a directory.
const setID = fs.ModeSetuid | fs.ModeSetgid

// AppliedMode is the mode Apply (and Export) give an entry whose mode in
// the changeset is m.
func AppliedMode(m fs.FileMode) fs.FileMode { return m &^ setID }

// Stripped reports whether Apply drops bits of mode m.
func Stripped(m fs.FileMode) bool { return m&setID != 0 }

// Journal file names in the journal directory.
const (
	journalName  = "apply.json"
	progressName = "apply.progress"
	tmpPrefix    = ".pinfold-apply-"
)

// journal is what Apply writes before touching anything: the operations,
// in order. Paths are bytes (base64 in JSON) since they may not be UTF-8.
type journal struct {
	Version int           `json:"version"`
	Tmp     string        `json:"tmp"` // prefix of this apply's temporary names
	Roots   []journalRoot `json:"roots"`
	Total   int           `json:"total"` // entries the operations apply
	Ops     []op          `json:"ops"`
}

type journalRoot struct {
	Lower []byte `json:"lower"`
	Upper []byte `json:"upper"`
}

// Operation kinds. Every operation is idempotent: re-running it after it
// completed, or after it was interrupted, leaves the same result.
const (
	opMkdir   = "mkdir"   // make a directory (replacing a non-directory), mode 0700 until opMeta
	opFile    = "file"    // copy the upper file aside, then rename it over the path
	opSymlink = "symlink" // make the symlink aside, then rename it over the path
	opLink    = "link"    // hard link Src aside, then rename it over the path
	opRemove  = "remove"  // unlink a non-directory
	opRmdir   = "rmdir"   // remove an empty directory (left in place when not empty)
	opMeta    = "meta"    // set a directory's mode and mtime
)

type op struct {
	Kind   string `json:"op"`
	Root   int    `json:"root"`
	Path   []byte `json:"path"`
	Src    []byte `json:"src,omitempty"`    // opLink: the path linked to
	Target []byte `json:"target,omitempty"` // opSymlink: the link's target
	Mode   uint32 `json:"mode,omitempty"`   // fs.FileMode
	MTime  int64  `json:"mtime,omitempty"`  // ns since the epoch
	Owner  *Owner `json:"owner,omitempty"`
	Entry  bool   `json:"entry,omitempty"` // completing this op applies one entry
}

// validRel tells whether p is a clean relative path that stays in its root.
func validRel(p string) bool {
	if p == "" || p[0] == '/' || strings.IndexByte(p, 0) >= 0 {
		return false
	}
	for _, c := range strings.Split(p, "/") {
		if c == "" || c == "." || c == ".." {
			return false
		}
	}
	return true
}

// splitPath splits a relative path into its directory ("" for the root)
// and its last name.
func splitPath(p string) (string, string) {
	d, b := path.Split(p)
	return strings.TrimSuffix(d, "/"), b
}
