package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A pinfold.yaml is policy the host obeys: its pre_run hooks run on the
// host, its mounts, environment and backend decide what a command gets.
// So discovery, walking up from the current directory, uses one only when
// nobody but the caller or root could have written it, as git does since
// safe.directory: the file and every directory walked to it belong to the
// caller or to root, and the file is writable by its owner only. A file
// that fails this is not used, and the walk stops there (an untrusted
// directory may hide or fake anything above it). TrustEnv lists the
// directories whose files are used anyway.

// TrustEnv names the variable listing trusted directories, separated by
// ':': discovery uses a pinfold.yaml in them or below them whoever owns it
// and whatever its mode. "*" trusts every directory. Entries that are not
// absolute paths trust nothing.
const TrustEnv = "PINFOLD_TRUSTED_DIRS"

// Untrusted is a pinfold.yaml discovery found and did not use.
type Untrusted struct {
	Path string // the file
	Why  string // why it is not used
}

// Message is the notice printed when discovery passed over a file: what,
// why, and how to use it anyway.
func (u *Untrusted) Message() string {
	dir := filepath.Dir(u.Path)
	return fmt.Sprintf("not using %s: %s; pinfold runs no policy another user could have written\n"+
		"  Fix: if you trust it, add its directory to %s (export %s=%s), or pass --config %s",
		u.Path, u.Why, TrustEnv, TrustEnv, shellQuote(dir), shellQuote(u.Path))
}

// Discovery is what Discover found walking up.
type Discovery struct {
	// Path is the pinfold.yaml in effect, or "" for none.
	Path string
	// Ignored is the file the walk stopped at without using it, or nil.
	Ignored *Untrusted
	// Walked are the directories looked in, nearest first (the walk's
	// inputs, for launch records).
	Walked []string
}

// Find looks for pinfold.yaml in dir and each of its parents up to /,
// and returns the path of the first it finds that may be trusted (see
// Discover), or "" when there is none.
func Find(dir string) (string, error) {
	d, err := Discover(dir)
	return d.Path, err
}

// Discover walks up from dir to / looking for pinfold.yaml, and stops at
// the first it finds, or at the first directory that belongs to neither
// the caller nor root. It uses the file only when it is trusted: a
// regular file (not a symbolic link), owned by the caller or root,
// writable by its owner only, in a directory walked to through
// directories of the caller's or root's; TrustEnv's directories are
// trusted whatever their owner and mode. A file passed over is in
// Ignored. Errors are what cannot be read: not knowing whether a policy
// applies is not the same as knowing none does.
func Discover(dir string) (Discovery, error) {
	var d Discovery
	if !filepath.IsAbs(dir) {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return d, err
		}
		dir = abs
	}
	dir = filepath.Clean(dir)
	uid := uint32(os.Geteuid())
	trusted := trustedDirs(os.Getenv(TrustEnv))
	for {
		d.Walked = append(d.Walked, dir)
		var ds syscall.Stat_t
		if err := syscall.Stat(dir, &ds); err != nil {
			return d, &Error{Path: dir, Msg: "cannot be read: " + errText(err), Err: err}
		}
		trust := isTrusted(trusted, dir)
		dirOK := trust || ownerOK(ds.Uid, uid)
		p := filepath.Join(dir, FileName)
		var st syscall.Stat_t
		err := syscall.Lstat(p, &st)
		switch {
		case err == nil:
			if !dirOK {
				d.Ignored = &Untrusted{Path: p, Why: "its directory belongs to " + owner(ds.Uid, uid)}
				return d, nil
			}
			if st.Mode&syscall.S_IFMT == syscall.S_IFLNK && !trust {
				d.Ignored = &Untrusted{Path: p, Why: "it is a symbolic link, which pinfold does not follow to find its policy"}
				return d, nil
			}
			if st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
				if err := syscall.Stat(p, &st); err != nil {
					return d, &Error{Path: p, Msg: "cannot be read: " + errText(err), Err: err}
				}
			}
			if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
				return d, &Error{Path: p, Msg: "is not a regular file"}
			}
			if !trust {
				if why := untrustedFile(&st, uid); why != "" {
					d.Ignored = &Untrusted{Path: p, Why: why}
					return d, nil
				}
			}
			d.Path = p
			return d, nil
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		default:
			return d, &Error{Path: p, Msg: "cannot be read: " + errText(err), Err: err}
		}
		parent := filepath.Dir(dir)
		if !dirOK {
			// The walk stops: above a directory another user owns
			// nothing is used. A file above is named, so that its owner
			// learns why it does not apply; nothing is read from it.
			for below, up := dir, parent; up != below; below, up = up, filepath.Dir(up) {
				if _, err := os.Lstat(filepath.Join(up, FileName)); err == nil {
					d.Ignored = &Untrusted{Path: filepath.Join(up, FileName),
						Why: "the directory " + dir + " on the way to it belongs to " + owner(ds.Uid, uid)}
					break
				}
			}
			return d, nil
		}
		if parent == dir {
			return d, nil
		}
		dir = parent
	}
}

// untrustedFile says why a config file with stat st may not be used by
// uid, or "".
func untrustedFile(st *syscall.Stat_t, uid uint32) string {
	if !ownerOK(st.Uid, uid) {
		return "it belongs to " + owner(st.Uid, uid)
	}
	if st.Mode&0o022 != 0 {
		return fmt.Sprintf("it is writable by its group or by others (mode %04o); chmod go-w it", st.Mode&0o7777)
	}
	return ""
}

// ownerOK tells whether a file of owner may be obeyed by caller: its
// own, root's, and, for root run through sudo, those of the user who ran
// sudo (SUDO_UID), as git does.
func ownerOK(owner, caller uint32) bool {
	if owner == caller || owner == 0 {
		return true
	}
	if caller == 0 {
		if u, err := strconv.ParseUint(os.Getenv("SUDO_UID"), 10, 32); err == nil && uint32(u) == owner {
			return true
		}
	}
	return false
}

// owner names a uid that is neither the caller's nor root's.
func owner(u, caller uint32) string {
	return fmt.Sprintf("uid %d, not to you (uid %d) or root", u, caller)
}

// trustedDirs parses TrustEnv's value: clean absolute paths, or "*".
func trustedDirs(v string) []string {
	var dirs []string
	for _, e := range strings.Split(v, ":") {
		switch {
		case e == "*":
			dirs = append(dirs, "*")
		case filepath.IsAbs(e):
			dirs = append(dirs, filepath.Clean(e))
		}
	}
	return dirs
}

// isTrusted tells whether dir is one of the trusted directories or below
// one.
func isTrusted(trusted []string, dir string) bool {
	for _, t := range trusted {
		if t == "*" || dir == t || strings.HasPrefix(dir, t+"/") || t == "/" {
			return true
		}
	}
	return false
}

// LoadDiscovered loads a file Discover returned, checking again, on the
// file it read, that it may be trusted: the file named may have been
// replaced since the walk.
func LoadDiscovered(path string) (*File, error) {
	if isTrusted(trustedDirs(os.Getenv(TrustEnv)), filepath.Dir(path)) {
		return Load(path)
	}
	// Opened without following a link and without waiting: a FIFO put in
	// its place after the walk must not hang pinfold.
	return load(path, syscall.O_NOFOLLOW|syscall.O_NONBLOCK, func(fh *os.File) error {
		var st syscall.Stat_t
		if err := syscall.Fstat(int(fh.Fd()), &st); err != nil {
			return err
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
			return errors.New("changed while pinfold read it: not a regular file")
		}
		if why := untrustedFile(&st, uint32(os.Geteuid())); why != "" {
			return errors.New("changed while pinfold read it: " + why)
		}
		return nil
	})
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+,=@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
