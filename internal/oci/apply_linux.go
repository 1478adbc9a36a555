package oci

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/pinfold/pinfold/internal/tarentry"
	"golang.org/x/sys/unix"
)

// OCI whiteout names.
const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
)

// limits bound one Apply and say how to set owners and modes.
type limits struct {
	maxBytes, maxEntries int64
	chown, keepSUID      bool
	shift                uint32
}

func (o ApplyOptions) limits() (limits, error) {
	switch {
	case o.UIDShift != 0 && !o.Chown:
		return limits{}, errors.New("UIDShift needs Chown")
	case o.KeepSUID && (!o.Chown || o.UIDShift == 0):
		return limits{}, errors.New("KeepSUID needs Chown and a non-zero UIDShift")
	}
	l := limits{maxBytes: o.MaxBytes, maxEntries: o.MaxEntries, chown: o.Chown, keepSUID: o.KeepSUID, shift: o.UIDShift}
	if l.maxBytes <= 0 {
		l.maxBytes = defaultMaxBytes
	}
	if l.maxEntries <= 0 {
		l.maxEntries = defaultMaxEntries
	}
	return l, nil
}

// streamMax bounds the decompressed tar streams of all layers together:
// file data plus generous room for headers, long names and padding, so that
// a stream of headers alone cannot run for ever.
func (l limits) streamMax() int64 {
	const perEntry = 8 << 10
	m := l.maxBytes
	if extra := min(l.maxEntries, 1<<40)*perEntry + 1<<20; m < 1<<62-extra {
		m += extra
	} else {
		m = 1 << 62
	}
	return m
}

// Reasons an entry is refused.
var (
	errEmptyName      = &reason{"entry name is empty", unsafeLayer}
	errNameNUL        = &reason{"entry name contains a NUL byte", unsafeLayer}
	errNameTooLong    = &reason{"entry name is longer than 4096 bytes", unsafeLayer}
	errNameEscapes    = &reason{"entry name escapes the root with ..", unsafeLayer}
	errSymlinkInPath  = &reason{"path traverses a symlink", unsafeLayer}
	errFileInPath     = &reason{"path goes through a file that is not a directory", unsafeLayer}
	errOutsideRoot    = &reason{"path leaves the root", unsafeLayer}
	errLinkTarget     = &reason{"symlink target is empty, too long or contains a NUL byte", unsafeLayer}
	errHardlinkTarget = &reason{"hard link target is not a regular file in the root", unsafeLayer}
	errWhiteoutName   = &reason{"whiteout names no file", unsafeLayer}
	errNoOpenat2      = &reason{"openat2 is not available; pinfold needs Linux 5.6 or later", unsupported}
)

// Apply unpacks img's layers in order into root, an existing directory
// (normally empty), with OCI whiteouts: ".wh.NAME" removes NAME as lower
// layers left it, and ".wh..wh..opq" removes everything lower layers put in
// its directory; neither touches what the same layer adds, whatever the
// order of its entries. A non-directory entry replaces what lower layers
// had at its path, a directory included; a directory merges with one.
// Every layer is read to its end, so that its digests are checked (see
// [Layer.Open]). On error root holds part of the image; the caller removes
// it.
//
// Every layer is hostile. Apply refuses, with an *EntryError wrapping
// ErrUnsafeLayer:
//   - names with a NUL byte, longer than 4096 bytes, empty, or whose ".."
//     would climb above the root (a leading "/" or "./" is read as relative
//     to the root), and whiteouts of "", "." or "..";
//   - entries whose path goes through a symlink or a non-directory: every
//     lookup is an openat2 below the root with RESOLVE_BENEATH,
//     RESOLVE_NO_SYMLINKS, RESOLVE_NO_MAGICLINKS and RESOLVE_NO_XDEV, and
//     nothing is created, removed or linked by following a symlink (image
//     builders record real paths, so real layers never need one);
//   - hard links whose target is not a regular file below the root (an
//     absolute target is read relative to the root);
//   - owner ids out of range, and entry types it does not know.
//
// Device nodes and fifos are left out and counted; the sandbox makes its
// own /dev. Setuid and setgid bits are dropped unless opt.KeepSUID, file
// sticky bits and extended attributes always; symlink targets are kept
// verbatim (they resolve inside the sandbox, never on the host). Apply
// stops with ErrLimit at opt.MaxBytes or opt.MaxEntries, counted over all
// layers.
func Apply(ctx context.Context, img *Image, root string, opt ApplyOptions) (ApplyStats, error) {
	lim, err := opt.limits()
	if err != nil {
		return ApplyStats{}, fmt.Errorf("applying image %s: %w", img.Source, err)
	}
	x := &applier{lim: lim}
	x.t = tarentry.Tree{
		Chown: lim.chown, Shift: lim.shift, KeepSUID: lim.keepSUID,
		MaxBytes: lim.maxBytes, MaxEntries: lim.maxEntries, Layers: true, Placed: x.mark,
		Truncated: "layer is truncated",
		Limits: func(entries bool, max int64) string {
			if entries {
				return fmt.Sprintf("layers have more than %d entries", max)
			}
			return fmt.Sprintf("layers expand beyond %d bytes", max)
		},
	}
	if err := x.t.Open(root); err != nil {
		return ApplyStats{}, fmt.Errorf("applying image %s: %w", img.Source, err)
	}
	defer x.t.Close()
	for i, l := range img.Layers {
		if err := x.layer(ctx, i+1, l); err != nil {
			return x.stats(), fmt.Errorf("applying image %s: %w", img.Source, err)
		}
		x.layers++
	}
	if dir, err := x.t.Finish(); err != nil {
		if dir != "" {
			err = fmt.Errorf("directory %s: %w", tarentry.Quote(dir), refusal(err))
		}
		return x.stats(), fmt.Errorf("applying image %s: %w", img.Source, err)
	}
	return x.stats(), nil
}

type applier struct {
	t   tarentry.Tree
	lim limits

	layers    int
	whiteouts int64
	devices   int64
	streamed  int64 // bytes of tar stream read over all layers
	pruned    int64 // paths a whiteout looked at and kept

	// What the current layer put in place, by clean name, with the
	// ancestors of each; true for a directory that layer created anew
	// (nothing of a lower layer can be below it). Whiteouts leave these
	// alone.
	seen map[string]bool

	layerN      int
	layerDigest string
}

func (x *applier) stats() ApplyStats {
	return ApplyStats{Layers: x.layers, Entries: x.t.Entries, Bytes: x.t.Bytes, Whiteouts: x.whiteouts,
		Removed: x.t.Removed, Devices: x.devices}
}

// layer applies one layer and reads its stream to the end.
func (x *applier) layer(ctx context.Context, n int, l Layer) error {
	x.layerN, x.layerDigest = n, l.name()
	x.seen = make(map[string]bool)
	rc, err := l.Open()
	if err != nil {
		return fmt.Errorf("layer %d: %w", n, err)
	}
	defer rc.Close()
	in := &streamCounter{r: rc, x: x}
	tr := tar.NewReader(in)
	last := ""
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("layer %d: %w", n, err)
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		// ErrInsecurePath comes with a usable header; names get their
		// own, stricter checks below.
		if err != nil && (hdr == nil || !errors.Is(err, tar.ErrInsecurePath)) {
			return x.streamError(last, err)
		}
		x.t.Entries++
		if err := x.t.Count(0); err != nil {
			return x.entryError(hdr.Name, err)
		}
		if err := x.entry(hdr, tr); err != nil {
			return x.entryError(hdr.Name, err)
		}
		last = hdr.Name
	}
	// Read on past the end-of-archive marker: the digests are checked
	// at the end of the stream.
	if _, err := io.Copy(io.Discard, in); err != nil {
		return fmt.Errorf("layer %d (%s): reading after its end: %w", n, x.layerDigest, err)
	}
	return nil
}

func (x *applier) entryError(name string, err error) error {
	return &EntryError{Layer: x.layerN, Digest: x.layerDigest, Entry: name, Err: refusal(err)}
}

func (x *applier) streamError(last string, err error) error {
	where := "at its start"
	if last != "" {
		where = "after entry " + tarentry.Quote(last)
	}
	if err == io.ErrUnexpectedEOF {
		return fmt.Errorf("layer %d (%s) is truncated %s: %w", x.layerN, x.layerDigest, where, err)
	}
	return fmt.Errorf("reading layer %d (%s) %s: %w", x.layerN, x.layerDigest, where, err)
}

// streamCounter caps the tar streams of all layers together.
type streamCounter struct {
	r io.Reader
	x *applier
}

func (s *streamCounter) Read(p []byte) (int, error) {
	max := s.x.lim.streamMax()
	if room := max - s.x.streamed + 1; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := s.r.Read(p)
	s.x.streamed += int64(n)
	if s.x.streamed > max {
		return n, &reason{fmt.Sprintf("layers expand beyond %d bytes of tar stream", max), limitExceeded}
	}
	return n, err
}

func (x *applier) entry(hdr *tar.Header, data io.Reader) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	name, err := tarentry.Clean(hdr.Name)
	if err != nil {
		return err
	}
	dir, base := tarentry.SplitName(name)
	if strings.HasPrefix(base, whiteoutPrefix) {
		return x.whiteout(dir, base)
	}
	if name == "" && hdr.Typeflag != tar.TypeDir {
		return errEmptyName
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return x.t.Mkdir(name, hdr)
	case tar.TypeReg, tar.TypeCont, tar.TypeGNUSparse:
		return x.t.WriteFile(name, hdr, data)
	case tar.TypeSymlink:
		return x.t.Symlink(name, hdr)
	case tar.TypeLink:
		target, err := tarentry.Clean(hdr.Linkname)
		if err == nil {
			err = x.t.Hardlink(name, target)
		}
		if err != nil && err != tarentry.ErrHardlinkTarget {
			err = fmt.Errorf("hard link target %s: %w", tarentry.Quote(hdr.Linkname), refusal(err))
		}
		return err
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		// The sandbox builds its own /dev; no node is ever made.
		x.devices++
		return nil
	}
	return &reason{fmt.Sprintf("unsupported entry type %s", tarentry.Quote(string(hdr.Typeflag))), unsafeLayer}
}

func joinName(dir, base string) string {
	if dir == "" {
		return base
	}
	return dir + "/" + base
}

// mark records that the current layer put name in place, and its
// ancestors; a directory it did not create keeps what it was marked.
func (x *applier) mark(name string, created bool) {
	x.seen[name] = created || x.seen[name]
	for p := name; p != ""; {
		p, _ = tarentry.SplitName(p)
		if _, ok := x.seen[p]; ok {
			return
		}
		x.seen[p] = false
	}
}

// whiteout applies the whiteout entry base in dir.
func (x *applier) whiteout(dir, base string) error {
	var target string
	switch {
	case base == opaqueMarker:
	case strings.HasPrefix(base, whiteoutPrefix+whiteoutPrefix):
		return nil // other aufs metadata, such as .wh..wh.plnk
	default:
		target = base[len(whiteoutPrefix):]
		if target == "" || target == "." || target == ".." {
			return errWhiteoutName
		}
	}
	x.whiteouts++
	dirfd := x.t.Root()
	if dir != "" {
		fd, err := tarentry.OpenBeneath(x.t.Root(), dir, unix.O_PATH|unix.O_DIRECTORY)
		if err == unix.ENOENT {
			return nil // nothing there to hide
		}
		if err != nil {
			return tarentry.ResolveError(dir, err)
		}
		defer unix.Close(fd)
		dirfd = fd
	}
	if target != "" {
		return x.prune(dirfd, target, joinName(dir, target))
	}
	// Opaque: everything in dir that this layer did not put there goes.
	names, err := tarentry.ReadDirNames(dirfd, ".", cmpOr(dir, "."))
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := x.prune(dirfd, n, joinName(dir, n)); err != nil {
			return err
		}
	}
	return nil
}

// prune removes what lower layers left at name (base in dirfd): all of it
// if the current layer did not put name in place, else, for a directory
// it merged with a lower one, what lies below and is not its own.
func (x *applier) prune(dirfd int, base, name string) error {
	fresh, ok := x.seen[name]
	if !ok {
		return x.t.RemoveAll(dirfd, base, name)
	}
	if fresh {
		return nil
	}
	// Looking through what the layer itself made is bounded, so that
	// whiteouts placed after deep trees cannot make the work quadratic.
	if x.pruned++; x.pruned > 4*x.lim.maxEntries {
		return &reason{"whiteouts look through too many entries", limitExceeded}
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT {
			return nil
		}
		return &fs.PathError{Op: "lstat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil
	}
	names, err := tarentry.ReadDirNames(dirfd, base, name)
	if err != nil {
		return err
	}
	fd, err := unix.Openat(dirfd, base, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	for _, n := range names {
		if err := x.prune(fd, n, name+"/"+n); err != nil {
			return err
		}
	}
	return nil
}

// cleanName is tarentry.Clean with this package's refusals.
func cleanName(name string) (string, error) {
	n, err := tarentry.Clean(name)
	return n, refusal(err)
}

// classes gives tarentry's refusals this package's errors (and class).
var classes = tarentry.Classes{
	Named: map[error]error{
		tarentry.ErrEmptyName:      errEmptyName,
		tarentry.ErrNameNUL:        errNameNUL,
		tarentry.ErrNameTooLong:    errNameTooLong,
		tarentry.ErrNameEscapes:    errNameEscapes,
		tarentry.ErrSymlinkInPath:  errSymlinkInPath,
		tarentry.ErrFileInPath:     errFileInPath,
		tarentry.ErrOutsideRoot:    errOutsideRoot,
		tarentry.ErrNoOpenat2:      errNoOpenat2,
		tarentry.ErrLinkTarget:     errLinkTarget,
		tarentry.ErrHardlinkTarget: errHardlinkTarget,
	},
	Unsafe: func(msg string) error { return &reason{msg, unsafeLayer} },
	Limit:  func(msg string) error { return &reason{msg, limitExceeded} },
}

// refusal is classes.Of.
func refusal(err error) error { return classes.Of(err) }
