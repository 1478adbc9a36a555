package store

import (
	"bufio"
	"compress/bzip2"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"os/exec"
	"strings"

	"github.com/pinfold/pinfold/internal/tarentry"
)

// decompressor is the decompressed form of an archive. wait ends it: with
// abort set it stops a host tool still running and reports only a failure
// the tool had on its own; without, it waits for the tool (the stream must
// have been read to its end) and reports any failure. A tool that exits
// non-zero or is killed is always an error, even after a complete tar
// stream.
type decompressor struct {
	r    io.Reader
	wait func(abort bool) error
}

// decompress looks at the first bytes of br and returns the tar stream they
// start. gzip and bzip2 are read in process; xz and zstd by the host's xz
// and zstd commands, if allowExec is set.
func decompress(ctx context.Context, archive string, br *bufio.Reader, allowExec bool) (decompressor, error) {
	magic, err := br.Peek(6)
	if err != nil && err != io.EOF {
		return decompressor{}, fmt.Errorf("reading archive %s: %w", archive, err)
	}
	none := func(bool) error { return nil }
	switch {
	case hasPrefix(magic, "\x1f\x8b"):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return decompressor{}, fmt.Errorf("reading archive %s: decompressing gzip: %w", archive, err)
		}
		return decompressor{r: &wrapErr{zr, "decompressing gzip"}, wait: none}, nil
	case hasPrefix(magic, "BZh") && len(magic) >= 4 && magic[3] >= '1' && magic[3] <= '9':
		return decompressor{r: &wrapErr{bzip2.NewReader(br), "decompressing bzip2"}, wait: none}, nil
	case hasPrefix(magic, "\xfd7zXZ\x00"):
		return runTool(ctx, archive, "xz", "xz-utils", br, allowExec)
	case hasPrefix(magic, "\x28\xb5\x2f\xfd"):
		return runTool(ctx, archive, "zstd", "zstd", br, allowExec)
	}
	for _, f := range [...]struct{ magic, name string }{
		{"\x04\x22\x4d\x18", "lz4-compressed"},
		{"LZIP", "lzip-compressed"},
		{"\x1f\x9d", "compress(1)-compressed"},
		{"PK\x03\x04", "a zip file"},
		{"7z\xbc\xaf\x27\x1c", "a 7-zip file"},
	} {
		if hasPrefix(magic, f.magic) {
			return decompressor{}, fmt.Errorf("archive %s is %s; pinfold reads tar, optionally compressed with gzip, bzip2, xz or zstd", archive, f.name)
		}
	}
	return decompressor{r: br, wait: none}, nil
}

func hasPrefix(b []byte, p string) bool {
	return len(b) >= len(p) && string(b[:len(p)]) == p
}

// runTool decompresses in with "tool -d -c".
func runTool(ctx context.Context, archive, tool, pkg string, in io.Reader, allowed bool) (decompressor, error) {
	if !allowed {
		return decompressor{}, fmt.Errorf("archive %s is %s-compressed, which this caller does not read", archive, tool)
	}
	bin, err := exec.LookPath(tool)
	if err != nil {
		return decompressor{}, fmt.Errorf("archive %s is %s-compressed and needs the %s command; install the %s package: %w",
			archive, tool, tool, pkg, ErrNoDecompressor)
	}
	cmd := exec.CommandContext(ctx, bin, "-d", "-c")
	cmd.Stdin = in
	stderr := &tarentry.HeadBuffer{Max: 512}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return decompressor{}, fmt.Errorf("decompressing archive %s: %w", archive, err)
	}
	if err := cmd.Start(); err != nil {
		return decompressor{}, fmt.Errorf("decompressing archive %s: starting %s: %w", archive, tool, err)
	}
	r := &eofReader{r: out}
	wait := func(abort bool) error {
		// A tool that has written all it will write is left to exit and
		// tell why; only one still writing is stopped.
		killed := abort && !r.eof && cmd.Process.Kill() == nil
		err := cmd.Wait()
		if err == nil {
			return ctx.Err()
		}
		if ee, ok := errors.AsType[*exec.ExitError](err); killed && (!ok || !ee.Exited()) {
			return nil // stopped by us
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		msg := strings.TrimSpace(stderr.String())
		if msg != "" {
			return fmt.Errorf("decompressing archive %s: %s failed: %w: %s", archive, tool, err, msg)
		}
		return fmt.Errorf("decompressing archive %s: %s failed: %w", archive, tool, err)
	}
	return decompressor{r: r, wait: wait}, nil
}

// eofReader remembers whether r reached its end.
type eofReader struct {
	r   io.Reader
	eof bool
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF {
		e.eof = true
	}
	return n, err
}

// wrapErr names the stream in the errors it returns, other than io.EOF.
type wrapErr struct {
	r    io.Reader
	what string
}

func (w *wrapErr) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("%s: %w", w.what, err)
	}
	return n, err
}

// sourceReader reads the archive file once: it feeds every byte to the
// digest, reports progress and stops when ctx is done.
type sourceReader struct {
	ctx      context.Context
	r        io.Reader
	h        hash.Hash
	n, total int64
	next     int64
	eof      bool
	progress func(done, total int64)
}

const progressStep = 4 << 20

func (s *sourceReader) Read(p []byte) (int, error) {
	if err := s.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := s.r.Read(p)
	if n > 0 {
		if s.h != nil {
			s.h.Write(p[:n])
		}
		s.n += int64(n)
	}
	if s.progress != nil && !s.eof && (s.n >= s.next || err == io.EOF) {
		s.eof = err == io.EOF
		s.next = s.n + progressStep
		s.progress(s.n, s.total)
	}
	return n, err
}
