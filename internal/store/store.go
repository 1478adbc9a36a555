// Package store is pinfold's per-user store: the bases pinfold has
// imported, and a small index that finds an imported base again without
// reading its archive.
//
// The store is /var/lib/pinfold for root and $XDG_DATA_HOME/pinfold
// (~/.local/share/pinfold when XDG_DATA_HOME is unset) for other users. The
// PINFOLD_STORE environment variable overrides both, and a caller may pass
// any directory to [Open]. Every directory the store creates has mode 0700.
//
// Layout:
//
//	bases/tar/<hex>/rootfs/         an extracted tar base; never changed once in place
//	bases/tar/<hex>/manifest.json   what the base is (see below)
//	index/tar/<key>                 "sha256:<hex>\n": the digest of the archive whose identity hashes to <key>
//	tmp/<pid>-<starttime>-<random>  work dirs and files of a running import
//
// <hex> is the sha256 of the archive file's bytes as given, compressed form
// included, so a base is named by its content. An import extracts into a
// work dir under tmp/ and renames the whole work dir to bases/tar/<hex> only
// when extraction has finished without error, so a base in bases/ is always
// complete. Two imports of the same archive may race; one rename wins and the
// other removes its own copy.
//
// manifest.json holds
//
//	{"digest":"sha256:<hex>","source":"/abs/path.tar.gz","size":N,"entries":N,
//	 "created":"RFC 3339 time","format":1,"uid_shift":N}
//
// where size is the archive's size in bytes, entries the number of entries
// read from it and uid_shift, present only for bases imported as root, the
// value added to every owner and group id.
//
// <key> is the hex sha256 of a source file's identity: device, inode, size,
// modification and change times in nanoseconds, absolute path, and the
// ownership setting of the import. Looking up a base already imported costs
// two stats and one small read; a file that changed in any of those fields
// misses the index and is hashed and extracted again.
//
// Work dir names carry the pid of the process that made them and its start
// time (field 22 of /proc/<pid>/stat), so [Store.CleanTmp] can tell the work
// dirs of processes that have gone (or whose pid now belongs to another
// process) from those still in use.
//
// Extraction treats every archive as hostile: see [Store.TarBase] for what it
// refuses.
package store

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/pinfold/pinfold/internal/tarentry"
)

// RootIDBase is the host id that root inside a sandbox maps to when
// pinfold runs as root (inside ids 0..tarentry.ShiftedIDs-1 are host
// RootIDBase+id), in the range systemd leaves to container managers
// (0x70000000), so a sandbox never holds host root. Bases unpacked as root
// have their owners shifted by it; the container runtimes share those
// roots.
const RootIDBase = 1879048192

// Shift is how the store shifts the owners of the bases it unpacks for
// this process (ImportOptions.UIDShift): RootIDBase as root, else 0.
func Shift() uint32 {
	if os.Geteuid() == 0 {
		return RootIDBase
	}
	return 0
}

// Store is an opened store directory. Its methods may be called from several
// goroutines at once, and several processes may share one store.
type Store struct {
	dir    string
	asRoot bool // the store belongs to root: imports set owners

	// imports counts archives read by this Store (index misses); tests use
	// it to tell a cache hit from a new import.
	imports atomic.Int64
}

// Base is an imported base.
type Base struct {
	Digest string // "sha256:<hex>" of the archive file
	Root   string // the extracted root filesystem, a directory
}

// ImportOptions tune an import. The zero value is ready to use.
type ImportOptions struct {
	// MaxBytes caps the total size of the files an archive expands to
	// (0 means 16 GiB).
	MaxBytes int64
	// MaxEntries caps the number of entries (0 means 1,000,000).
	MaxEntries int
	// UIDShift is added to every owner and group id in the archive when the
	// import runs as root, so that files show their archive ids inside a
	// user namespace that maps 0 to UIDShift. Imports by other users leave
	// all files owned by the user.
	UIDShift uint32
	// Progress, if not nil, is called now and then with the bytes of the
	// archive file read so far and its size. It is called from one
	// goroutine at a time, not always the caller's.
	Progress func(done, total int64)
}

const (
	defaultMaxBytes   = 16 << 30
	defaultMaxEntries = 1_000_000

	// manifestFormat is the version of the base layout and manifest.json.
	manifestFormat = 1
)

// Errors that callers may branch on with errors.Is. They are wrapped by
// errors that name the archive and the entry.
var (
	// ErrUnsafeArchive: an entry would escape the root, go through a
	// symlink, create a device node, or is otherwise refused.
	ErrUnsafeArchive = errors.New("unsafe archive")
	// ErrLimit: the archive expands beyond ImportOptions.MaxBytes or has more
	// than ImportOptions.MaxEntries entries.
	ErrLimit = errors.New("archive limit exceeded")
	// ErrNoDecompressor: the archive needs a host tool (xz, zstd) that is
	// not installed.
	ErrNoDecompressor = errors.New("decompressor not installed")
)

// EntryError is an archive entry that could not be extracted or was refused.
type EntryError struct {
	Archive string // path of the archive
	Entry   string // name of the entry as written in the archive
	Err     error
}

func (e *EntryError) Error() string {
	return "archive " + e.Archive + ": entry " + tarentry.Quote(e.Entry) + ": " + e.Err.Error()
}

func (e *EntryError) Unwrap() error { return e.Err }

// reason is an error with a fixed text that belongs to one of the classes
// above. The class is a number, not an error, so that reasons declared as
// package variables are laid out by the compiler and cost nothing at init.
type reason struct {
	msg   string
	class errClass
}

type errClass uint8

const (
	unsafeArchive errClass = iota
	limitExceeded
)

func (r *reason) Error() string { return r.msg }

func (r *reason) Unwrap() error {
	if r.class == limitExceeded {
		return ErrLimit
	}
	return ErrUnsafeArchive
}

// DefaultDir returns the store directory for the current user: the
// PINFOLD_STORE environment variable if set, /var/lib/pinfold for root,
// else $XDG_DATA_HOME/pinfold or ~/.local/share/pinfold.
func DefaultDir() (string, error) {
	if d := os.Getenv("PINFOLD_STORE"); d != "" {
		return absPath(d)
	}
	if os.Geteuid() == 0 {
		return "/var/lib/pinfold", nil
	}
	if d := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "pinfold"), nil
	}
	home := os.Getenv("HOME")
	if !filepath.IsAbs(home) {
		return "", errors.New("finding the store: HOME is not set; set PINFOLD_STORE")
	}
	return filepath.Join(home, ".local", "share", "pinfold"), nil
}

// Dir returns the store's directory, an absolute path.
func (s *Store) Dir() string { return s.dir }
