package store

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Open opens the store in dir, creating it with mode 0700 if it does not
// exist; an empty dir means DefaultDir. The directory must belong to the
// current user and not be writable by others.
func Open(dir string) (*Store, error) {
	if dir == "" {
		d, err := DefaultDir()
		if err != nil {
			return nil, err
		}
		dir = d
	}
	dir, err := absPath(dir)
	if err != nil {
		return nil, fmt.Errorf("opening store: %w", err)
	}
	var st unix.Stat_t
	err = unix.Stat(dir, &st)
	if err == unix.ENOENT {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("creating store: %w", err)
		}
		err = unix.Stat(dir, &st)
	}
	if err != nil {
		return nil, fmt.Errorf("opening store: %w", &fs.PathError{Op: "stat", Path: dir, Err: err})
	}
	if err := owned(dir, &st); err != nil {
		return nil, fmt.Errorf("opening store %w", err)
	}
	return &Store{dir: dir, asRoot: st.Uid == 0}, nil
}

// owned refuses a store another user could change: a store is where
// pinfold finds its sessions' sockets and records, which it then trusts.
func owned(dir string, st *unix.Stat_t) error {
	switch uid := uint32(unix.Geteuid()); {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("%s: not a directory", dir)
	case st.Uid != uid:
		return fmt.Errorf("%s: it belongs to uid %d, not to uid %d", dir, st.Uid, uid)
	case st.Mode&0o022 != 0:
		return fmt.Errorf("%s: others may write to it (mode %#o); chmod 700 it", dir, st.Mode&0o7777)
	}
	return nil
}

// Check is Open's ownership check without creating the store: nil for a
// store that does not exist yet, or one of the current user's own that
// others cannot write to. Commands that only read what a store holds
// (sessions, their sockets) call it before trusting any of it.
func Check(dir string) error {
	var st unix.Stat_t
	err := unix.Stat(dir, &st)
	if err == unix.ENOENT {
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening store: %w", &fs.PathError{Op: "stat", Path: dir, Err: err})
	}
	if err := owned(dir, &st); err != nil {
		return fmt.Errorf("opening store %w", err)
	}
	return nil
}

// absPath makes p absolute and clean without the stats os.Getwd makes.
func absPath(p string) (string, error) {
	if filepath.IsAbs(p) {
		return filepath.Clean(p), nil
	}
	wd, err := unix.Getwd()
	if err != nil {
		return "", fmt.Errorf("making %s absolute: %w", p, err)
	}
	return filepath.Join(wd, p), nil
}

// TarBase returns the root filesystem of the tar archive at path,
// importing the archive into the store on its first use. The archive may be
// plain or compressed with gzip, bzip2, xz or zstd, told apart by their
// first bytes; xz and zstd need the host's xz and zstd commands.
//
// A base already imported from the same unchanged file is found through the
// index without reading the archive. Otherwise the archive is read once:
// hashed and extracted in the same pass into a work dir, which is renamed
// into place only when everything succeeded.
//
// Extraction refuses, with an *EntryError wrapping ErrUnsafeArchive:
//   - names with a NUL byte, longer than 4096 bytes, empty, or whose ".."
//     would climb above the root (a leading "/" or "./" is read as relative
//     to the root, as tar does);
//   - entries whose path goes through a symlink or a non-directory: every
//     lookup is an openat2 below the root with RESOLVE_BENEATH and
//     RESOLVE_NO_SYMLINKS, and nothing is created by following a symlink;
//   - a non-directory where the archive already made a directory (an
//     earlier non-directory is replaced, as tar does);
//   - hard links whose target is not a regular file extracted earlier from
//     the same archive;
//   - device nodes and fifos outside dev/ (those under dev/ are skipped:
//     the sandbox makes its own /dev, and pinfold never calls mknod);
//   - owner ids out of range, and entry types it does not know.
//
// It also drops setuid, setgid and (on files) sticky bits and extended
// attributes, keeps symlink targets verbatim (they resolve inside the
// sandbox, never on the host), and stops with ErrLimit at opt.MaxBytes of
// file data and symlink targets (checked against each header before
// anything is written) or opt.MaxEntries entries (directories made for
// unlisted parents count too). An archive cut short, a corrupt
// compressed stream, or a decompressor that fails or is killed is an
// error. On any error nothing is left behind.
func (s *Store) TarBase(ctx context.Context, path string, opt ImportOptions) (Base, error) {
	abs, err := absPath(path)
	if err != nil {
		return Base{}, fmt.Errorf("tar base: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(abs, &st); err != nil {
		return Base{}, fmt.Errorf("tar base: %w", &fs.PathError{Op: "stat", Path: abs, Err: err})
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return Base{}, fmt.Errorf("tar base %s: not a regular file", abs)
	}
	lim := opt.limits(s.asRoot)
	key := indexKey(&st, abs, lim)
	if b, ok := s.lookup(key); ok {
		return b, nil
	}
	return s.importTar(ctx, abs, key, lim, opt.Progress)
}

// indexKey is the hex sha256 of what identifies a file's content without
// reading it, plus the ownership setting of the import.
func indexKey(st *unix.Stat_t, abs string, lim limits) string {
	b := make([]byte, 0, 128+len(abs))
	b = append(b, "pinfold tar index 1\x00"...)
	for _, v := range [...]uint64{
		st.Dev, st.Ino, uint64(st.Size),
		uint64(st.Mtim.Sec), uint64(st.Mtim.Nsec),
		uint64(st.Ctim.Sec), uint64(st.Ctim.Nsec),
		uint64(ownership(lim)),
	} {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	b = append(b, abs...)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// ownership encodes how an import sets owners: -1 for not at all, else the
// shift.
func ownership(lim limits) int64 {
	if !lim.chown {
		return -1
	}
	return int64(lim.shift)
}

const digestPrefix = "sha256:"

// lookup finds a base through the index: one small read and one stat.
func (s *Store) lookup(key string) (Base, bool) {
	var buf [128]byte
	n, err := readSmall(s.dir+"/index/tar/"+key, buf[:])
	const want = len(digestPrefix) + 64 + 1
	if err != nil || n != want || string(buf[:len(digestPrefix)]) != digestPrefix || buf[n-1] != '\n' {
		return Base{}, false
	}
	sum := string(buf[len(digestPrefix) : n-1])
	if !isHex(sum) {
		return Base{}, false
	}
	root := s.baseDir(sum) + "/rootfs"
	var st unix.Stat_t
	if unix.Stat(root, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return Base{}, false
	}
	return Base{Digest: digestPrefix + sum, Root: root}, true
}

func (s *Store) baseDir(sum string) string { return s.dir + "/bases/tar/" + sum }

// readSmall reads a small file into buf with plain system calls (os.Open
// would also set up the poller). A file that fills buf is too big.
func readSmall(path string, buf []byte) (int, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err == nil && n == len(buf) {
			err = unix.EFBIG
		}
		return n, err
	}
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return len(s) > 0
}

// manifest is bases/tar/<hex>/manifest.json.
type manifest struct {
	Digest   string  `json:"digest"`
	Source   string  `json:"source"`
	Size     int64   `json:"size"`
	Entries  int     `json:"entries"`
	Created  string  `json:"created"`
	Format   int     `json:"format"`
	UIDShift *uint32 `json:"uid_shift,omitempty"`
}

// importTar reads the archive at abs once, hashing and extracting it, and
// puts the result in place.
func (s *Store) importTar(ctx context.Context, abs, key string, lim limits, progress func(done, total int64)) (_ Base, err error) {
	s.imports.Add(1)
	for _, d := range [...]string{"tmp", "bases/tar", "index/tar"} {
		if err := os.MkdirAll(s.dir+"/"+d, 0o700); err != nil {
			return Base{}, fmt.Errorf("importing %s: %w", abs, err)
		}
	}
	f, err := os.Open(abs)
	if err != nil {
		return Base{}, fmt.Errorf("importing: %w", err)
	}
	defer f.Close()
	var before unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &before); err != nil {
		return Base{}, fmt.Errorf("importing: %w", &fs.PathError{Op: "fstat", Path: abs, Err: err})
	}
	if before.Mode&unix.S_IFMT != unix.S_IFREG {
		return Base{}, fmt.Errorf("importing %s: not a regular file", abs)
	}

	work, err := s.newWorkDir()
	if err != nil {
		return Base{}, fmt.Errorf("importing %s: %w", abs, err)
	}
	keep := false
	defer func() {
		if !keep {
			if rerr := removeTree(work); rerr != nil && err == nil {
				err = fmt.Errorf("importing %s: removing work dir: %w", abs, rerr)
			}
		}
	}()
	root := work + "/rootfs"
	if err := os.Mkdir(root, 0o700); err != nil {
		return Base{}, fmt.Errorf("importing %s: %w", abs, err)
	}

	stats, sum, n, err := extractHashed(ctx, f, abs, &before, work, root, lim, progress)
	if err != nil {
		return Base{}, err
	}
	digest := digestPrefix + sum

	m := manifest{
		Digest:  digest,
		Source:  abs,
		Size:    n,
		Entries: stats.entries,
		Created: time.Now().UTC().Format(time.RFC3339),
		Format:  manifestFormat,
	}
	if lim.chown {
		m.UIDShift = &lim.shift
	}
	if err := writeManifest(work+"/manifest.json", &m); err != nil {
		return Base{}, fmt.Errorf("importing %s: %w", abs, err)
	}
	if err := syncDir(work); err != nil {
		return Base{}, fmt.Errorf("importing %s: %w", abs, err)
	}

	final := s.baseDir(sum)
	won, err := commitDir(work, final)
	if err != nil {
		return Base{}, fmt.Errorf("importing %s: %w", abs, err)
	}
	keep = won
	if !won {
		// Another import of the same content is in place (it won a race, or
		// this file changed only its metadata). Use it if it fits.
		if err := checkBase(final, lim); err != nil {
			return Base{}, fmt.Errorf("importing %s: %w", abs, err)
		}
	}

	// Index the file only if it did not change while it was read; the
	// base itself is right either way, since it is named by what was read.
	var after unix.Stat_t
	if unix.Fstat(int(f.Fd()), &after) == nil && sameFile(&before, &after) {
		_ = s.writeIndex(key, digest) // a missing entry costs only a re-import
	}
	return Base{Digest: digest, Root: final + "/rootfs"}, nil
}

// extractHashed extracts the archive f (abs, as before stats it) into
// root and returns what it extracted, the file's sha256 and its size as
// read. The digest is computed on another CPU from a second read of the
// file (from the page cache), and writeback of work starts while the
// files are still being made, so that neither waits at the end. The file
// must not change meanwhile: it is refused if it did.
func extractHashed(ctx context.Context, f *os.File, abs string, before *unix.Stat_t, work, root string, lim limits, progress func(done, total int64)) (extractStats, string, int64, error) {
	hashed := make(chan hashResult, 1)
	go func() { hashed <- hashFile(abs) }()
	stopFlush := flushWhile(work)
	src := &sourceReader{ctx: ctx, r: f, total: before.Size, progress: progress}
	br := bufio.NewReaderSize(src, 256<<10)
	stats, err := extractArchive(ctx, abs, br, root, lim, true)
	if err == nil {
		// The digest covers the whole file, also what follows the archive.
		if _, err = io.Copy(io.Discard, br); err != nil {
			err = fmt.Errorf("reading archive %s: %w", abs, err)
		}
	}
	stopFlush()
	h := <-hashed
	if err != nil {
		return stats, "", 0, err
	}
	if h.err != nil {
		return stats, "", 0, fmt.Errorf("reading archive %s: %w", abs, h.err)
	}
	var during unix.Stat_t
	if unix.Fstat(int(f.Fd()), &during) != nil || !sameFile(before, &during) || h.n != src.n {
		return stats, "", 0, fmt.Errorf("importing %s: the archive changed while it was read; run again", abs)
	}
	return stats, h.sum, src.n, nil
}

func sameFile(a, b *unix.Stat_t) bool {
	return a.Dev == b.Dev && a.Ino == b.Ino && a.Size == b.Size && a.Mtim == b.Mtim && a.Ctim == b.Ctim
}

func writeManifest(path string, m *manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o600)
}

// syncDir flushes the file system that holds dir, so that a base renamed
// into place survives a crash whole.
type hashResult struct {
	sum string
	n   int64
	err error
}

// hashFile returns the hex sha256 of the file at path and its length.
func hashFile(path string) hashResult {
	f, err := os.Open(path)
	if err != nil {
		return hashResult{err: err}
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, f, make([]byte, 256<<10))
	return hashResult{sum: hex.EncodeToString(h.Sum(nil)), n: n, err: err}
}

// flushWhile writes back dir's file system now and then until the
// returned function is called, so the final sync finds little to do.
func flushWhile(dir string) (stop func()) {
	done := make(chan struct{})
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return func() {}
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		defer unix.Close(fd)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				unix.Syncfs(fd)
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

func syncDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		return &fs.PathError{Op: "syncfs", Path: dir, Err: err}
	}
	return nil
}

// commitDir renames work to final unless final exists, and reports whether
// it did.
func commitDir(work, final string) (bool, error) {
	err := unix.Renameat2(unix.AT_FDCWD, work, unix.AT_FDCWD, final, unix.RENAME_NOREPLACE)
	if err == unix.EINVAL || err == unix.ENOSYS {
		// No RENAME_NOREPLACE here; a plain rename still refuses to
		// replace a directory that is not empty, and bases never are.
		err = unix.Rename(work, final)
	}
	switch err {
	case nil:
		return true, nil
	case unix.EEXIST, unix.ENOTEMPTY:
		return false, nil
	}
	return false, &os.LinkError{Op: "rename", Old: work, New: final, Err: err}
}

// checkBase checks that the base in dir is complete and has the ownership
// lim asks for.
func checkBase(dir string, lim limits) error {
	b, err := os.ReadFile(dir + "/manifest.json")
	if err != nil {
		return fmt.Errorf("base %s: %w", dir, err)
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("base %s: reading manifest.json: %w", dir, err)
	}
	if m.Format != manifestFormat {
		return fmt.Errorf("base %s has format %d, not %d", dir, m.Format, manifestFormat)
	}
	have, want := "not set", "not set"
	if m.UIDShift != nil {
		have = fmt.Sprintf("shifted by %d", *m.UIDShift)
	}
	if lim.chown {
		want = fmt.Sprintf("shifted by %d", lim.shift)
	}
	if have != want {
		return fmt.Errorf("base %s has its owners %s, not %s as asked", dir, have, want)
	}
	if fi, err := os.Lstat(dir + "/rootfs"); err != nil || !fi.IsDir() {
		return fmt.Errorf("base %s has no rootfs directory", dir)
	}
	return nil
}

// writeIndex records that the file with key holds digest.
func (s *Store) writeIndex(key, digest string) error {
	tmp, err := s.workName()
	if err != nil {
		return err
	}
	if err := os.WriteFile(tmp, []byte(digest+"\n"), 0o600); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, s.dir+"/index/tar/"+key); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// errIs reports whether err is one of the errnos.
func errIs(err error, errnos ...unix.Errno) bool {
	for _, e := range errnos {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
