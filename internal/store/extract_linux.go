package store

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/pinfold/pinfold/internal/tarentry"
)

// limits bound one extraction and say how to set ownership.
type limits struct {
	maxBytes   int64
	maxEntries int
	chown      bool   // set owners (root only)
	shift      uint32 // added to archive ids when chown is set
}

func (o ImportOptions) limits(chown bool) limits {
	l := limits{maxBytes: o.MaxBytes, maxEntries: o.MaxEntries, chown: chown, shift: o.UIDShift}
	if l.maxBytes <= 0 {
		l.maxBytes = defaultMaxBytes
	}
	if l.maxEntries <= 0 {
		l.maxEntries = defaultMaxEntries
	}
	return l
}

// streamMax bounds the decompressed tar stream: file data plus generous
// room for headers, long names and padding, so that a stream of headers
// alone cannot run for ever.
func (l limits) streamMax() int64 {
	const perEntry = 8 << 10
	m := l.maxBytes
	if extra := int64(l.maxEntries)*perEntry + 1<<20; m < 1<<62-extra {
		m += extra
	} else {
		m = 1 << 62
	}
	return m
}

// extractStats tells what an extraction did.
type extractStats struct {
	entries int   // entries read, skipped ones included
	made    int   // directories made for entries whose parents were not listed
	bytes   int64 // bytes of file data and symlink targets written
	skipped int   // device nodes and fifos under dev/ left out
}

// Reasons an entry is refused.
var (
	errEmptyName      = &reason{"entry name is empty", unsafeArchive}
	errNameNUL        = &reason{"entry name contains a NUL byte", unsafeArchive}
	errNameTooLong    = &reason{"entry name is longer than 4096 bytes", unsafeArchive}
	errNameEscapes    = &reason{"entry name escapes the root with ..", unsafeArchive}
	errSymlinkInPath  = &reason{"path traverses a symlink", unsafeArchive}
	errFileInPath     = &reason{"path goes through a file that is not a directory", unsafeArchive}
	errOutsideRoot    = &reason{"path leaves the extraction root", unsafeArchive}
	errReplaceDir     = &reason{"would replace a directory with a non-directory", unsafeArchive}
	errDevice         = &reason{"archive contains a device node outside dev/", unsafeArchive}
	errFifo           = &reason{"archive contains a fifo outside dev/", unsafeArchive}
	errLinkTarget     = &reason{"symlink target is empty, too long or contains a NUL byte", unsafeArchive}
	errHardlinkTarget = &reason{"hard link target is not a regular file extracted from this archive", unsafeArchive}
	errNoOpenat2      = errors.New("openat2 is not available; pinfold needs Linux 5.6 or later")
)

// extractArchive reads the archive in br, plain or compressed, extracts it
// into root, an existing empty directory, and reads the tar stream and the
// decompressor to their ends so that every byte is checked. On error root
// may hold part of the tree, which the caller removes. allowExec allows
// host decompressors.
func extractArchive(ctx context.Context, archive string, br *bufio.Reader, root string, lim limits, allowExec bool) (extractStats, error) {
	d, err := decompress(ctx, archive, br, allowExec)
	if err != nil {
		return extractStats{}, err
	}
	st, err := extract(ctx, archive, d.r, root, lim)
	if err != nil {
		// A decompressor that failed explains a broken tar stream
		// better than the tar reader can.
		if derr := d.wait(true); derr != nil {
			return st, derr
		}
		return st, err
	}
	return st, d.wait(false)
}

// extract extracts the tar stream r into root and reads r to its end.
func extract(ctx context.Context, archive string, r io.Reader, root string, lim limits) (extractStats, error) {
	x := &extractor{archive: archive, t: tarentry.Tree{
		Chown: lim.chown, Shift: lim.shift, MaxBytes: lim.maxBytes, MaxEntries: int64(lim.maxEntries),
		Truncated: "archive is truncated",
		Limits: func(entries bool, max int64) string {
			if entries {
				return fmt.Sprintf("archive has more than %d entries", max)
			}
			return fmt.Sprintf("archive expands beyond %d bytes", max)
		},
	}}
	if err := x.t.Open(root); err != nil {
		return extractStats{}, err
	}
	defer x.t.Close()

	in := &tarStream{r: r, max: lim.streamMax()}
	tr := tar.NewReader(in)
	last := ""
	for {
		if err := ctx.Err(); err != nil {
			return x.stats(), fmt.Errorf("extracting archive %s: %w", archive, err)
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		// ErrInsecurePath comes with a usable header; names get their
		// own, stricter checks below.
		if err != nil && (hdr == nil || !errors.Is(err, tar.ErrInsecurePath)) {
			return x.stats(), x.streamError(last, err)
		}
		x.t.Entries++
		if err := x.t.Count(0); err != nil {
			return x.stats(), &EntryError{Archive: archive, Entry: hdr.Name, Err: refusal(err)}
		}
		if err := x.entry(hdr, tr); err != nil {
			return x.stats(), &EntryError{Archive: archive, Entry: hdr.Name, Err: refusal(err)}
		}
		last = hdr.Name
	}
	if x.t.Entries == 0 {
		return x.stats(), fmt.Errorf("archive %s has no entries", archive)
	}
	if !in.ended() {
		return x.stats(), fmt.Errorf("archive %s is truncated: no end-of-archive marker after entry %s", archive, tarentry.Quote(last))
	}
	if dir, err := x.t.Finish(); err != nil {
		if dir == "" {
			return x.stats(), fmt.Errorf("archive %s: %w", archive, err)
		}
		return x.stats(), &EntryError{Archive: archive, Entry: dir, Err: refusal(err)}
	}
	// Read on past the end-of-archive marker so that a compressed stream
	// is checked to its end and the digest covers every byte.
	if _, err := io.Copy(io.Discard, in); err != nil {
		return x.stats(), fmt.Errorf("reading archive %s after its end: %w", archive, err)
	}
	return x.stats(), nil
}

func (x *extractor) streamError(last string, err error) error {
	where := "at its start"
	if last != "" {
		where = "after entry " + tarentry.Quote(last)
	}
	if err == io.ErrUnexpectedEOF {
		return fmt.Errorf("archive %s is truncated %s: %w", x.archive, where, err)
	}
	return fmt.Errorf("reading archive %s %s: %w", x.archive, where, err)
}

// tarStream counts the decompressed stream, caps it, and remembers where
// its last non-zero byte was, to tell an archive that ends with the zero
// blocks of an end-of-archive marker from one cut short between entries.
type tarStream struct {
	r        io.Reader
	n        int64 // bytes read
	lastData int64 // offset just past the last non-zero byte read
	max      int64
}

func (t *tarStream) Read(p []byte) (int, error) {
	if room := t.max - t.n + 1; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := t.r.Read(p)
	for i := n - 1; i >= 0; i-- {
		if p[i] != 0 {
			t.lastData = t.n + int64(i) + 1
			break
		}
	}
	t.n += int64(n)
	if t.n > t.max {
		return n, &reason{fmt.Sprintf("archive expands beyond %d bytes of tar stream", t.max), limitExceeded}
	}
	return n, err
}

func (t *tarStream) ended() bool { return t.n-t.lastData >= 512 }

type extractor struct {
	archive string
	t       tarentry.Tree
	skipped int
}

func (x *extractor) stats() extractStats {
	return extractStats{entries: int(x.t.Entries), made: int(x.t.Made), bytes: x.t.Bytes, skipped: x.skipped}
}

func (x *extractor) entry(hdr *tar.Header, data io.Reader) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	name, err := tarentry.Clean(hdr.Name)
	if err != nil {
		return err
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
		if err != nil {
			return fmt.Errorf("hard link target %s: %w", tarentry.Quote(hdr.Linkname), refusal(err))
		}
		err = x.t.Hardlink(name, target)
		if err != nil && err != tarentry.ErrHardlinkTarget {
			err = fmt.Errorf("hard link target %s: %w", tarentry.Quote(hdr.Linkname), refusal(err))
		}
		return err
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		// The sandbox builds its own /dev; device nodes are never made.
		if name == "dev" || strings.HasPrefix(name, "dev/") {
			x.skipped++
			return nil
		}
		if hdr.Typeflag == tar.TypeFifo {
			return errFifo
		}
		return errDevice
	}
	return &reason{fmt.Sprintf("unsupported entry type %s", tarentry.Quote(string(hdr.Typeflag))), unsafeArchive}
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
		tarentry.ErrReplaceDir:     errReplaceDir,
	},
	Unsafe: func(msg string) error { return &reason{msg, unsafeArchive} },
	Limit:  func(msg string) error { return &reason{msg, limitExceeded} },
}

// refusal is classes.Of.
func refusal(err error) error { return classes.Of(err) }
