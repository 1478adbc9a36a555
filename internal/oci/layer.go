package oci

import (
	"bufio"
	"compress/gzip"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os/exec"
	"strings"

	"github.com/pinfold/pinfold/internal/tarentry"
)

// Open returns the layer's tar stream, decompressed: gzip in process, zstd
// by the host's zstd command (an error wrapping ErrNoDecompressor when it
// is not installed). The compression is told from the blob's first bytes.
//
// The blob is checked against Digest and Size, and the decompressed
// stream against DiffID, as they are read: the read that reaches the end
// of the stream returns an error wrapping ErrDigest instead of io.EOF if
// either does not match. A caller that stops early has checked nothing.
// Close the stream when done; closing early stops a zstd still running.
func (l Layer) Open() (io.ReadCloser, error) {
	if l.open == nil {
		return nil, errors.New("opening layer: it has no source")
	}
	raw, err := l.open()
	if err != nil {
		return nil, fmt.Errorf("opening layer %s: %w", l.name(), err)
	}
	lr := &layerReader{raw: raw, r: raw}
	var blob *verifier
	if l.Digest != "" {
		if blob, err = newVerifier(raw, l.Digest, l.Size, "layer blob "+l.Digest); err != nil {
			raw.Close()
			return nil, err
		}
		lr.r = blob
	}
	br := bufio.NewReaderSize(lr.r, 64<<10)
	magic, err := br.Peek(6)
	if err != nil && err != io.EOF {
		raw.Close()
		return nil, fmt.Errorf("reading layer %s: %w", l.name(), err)
	}
	plain := false
	switch c := sniff(magic); c {
	case "gzip":
		zr, err := gzip.NewReader(br)
		if err != nil {
			raw.Close()
			return nil, fmt.Errorf("reading layer %s: decompressing gzip: %w", l.name(), err)
		}
		lr.r, lr.dec = &wrapErr{zr, "decompressing gzip"}, zr
	case "zstd":
		t, err := zstd(br, blob)
		if err != nil {
			raw.Close()
			return nil, fmt.Errorf("reading layer %s: %w", l.name(), err)
		}
		lr.r, lr.dec = t, t
	case "":
		lr.r, plain = br, true
	default:
		raw.Close()
		return nil, fmt.Errorf("layer %s is %s-compressed; layers are tar, tar+gzip or tar+zstd", l.name(), c)
	}
	// A plain blob already checked against the same digest needs no
	// second pass.
	if l.DiffID != "" && !(plain && l.DiffID == l.Digest) {
		v, err := newVerifier(lr.r, l.DiffID, -1, "layer content (diff id "+l.DiffID+")")
		if err != nil {
			lr.Close()
			return nil, err
		}
		lr.r = v
	}
	return lr, nil
}

func (l Layer) name() string { return cmpOr(l.Digest, l.DiffID) }

// layerReader is a layer's decompressed stream and what to close.
type layerReader struct {
	r   io.Reader
	dec io.Closer // decompressor, if any
	raw io.Closer
}

func (l *layerReader) Read(p []byte) (int, error) { return l.r.Read(p) }

func (l *layerReader) Close() error {
	// The decompressor first: a zstd still reading from raw is stopped.
	if l.dec != nil {
		l.dec.Close()
	}
	return l.raw.Close()
}

// verifier checks what passes through it against a digest and, unless
// size is negative, a size. At the end it returns io.EOF only if both
// match; its first error sticks.
type verifier struct {
	r       io.Reader
	h       hash.Hash
	digest  string
	want    string // hex
	size, n int64
	what    string
	err     error // io.EOF once checked
}

func newVerifier(r io.Reader, digest string, size int64, what string) (*verifier, error) {
	alg, want, err := parseDigest(digest)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return &verifier{r: r, h: newHash(alg), digest: digest, want: want, size: size, what: what}, nil
}

func (v *verifier) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	if v.size >= 0 {
		// One byte more than is left, to notice a blob that is too long.
		if room := v.size - v.n + 1; int64(len(p)) > room {
			p = p[:room]
		}
	}
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if v.size >= 0 && v.n > v.size {
		v.err = fmt.Errorf("%s is longer than its %d bytes: %w", v.what, v.size, ErrDigest)
		return n, v.err
	}
	if err == io.EOF {
		v.err = v.check()
		return n, v.err
	}
	return n, err
}

func (v *verifier) check() error {
	if v.size >= 0 && v.n != v.size {
		return fmt.Errorf("%s is %d bytes, not %d: %w", v.what, v.n, v.size, ErrDigest)
	}
	if got := hex.EncodeToString(v.h.Sum(nil)); got != v.want {
		alg, _, _ := strings.Cut(v.digest, ":")
		return fmt.Errorf("%s has digest %s:%s: %w", v.what, alg, got, ErrDigest)
	}
	return io.EOF
}

// wrapErr names the stream in the errors it returns, other than io.EOF and
// the verifier's (which name themselves).
type wrapErr struct {
	r    io.Reader
	what string
}

func (w *wrapErr) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	if err != nil && err != io.EOF && !errors.Is(err, ErrDigest) {
		err = fmt.Errorf("%s: %w", w.what, err)
	}
	return n, err
}

// zstd decompresses in with "zstd -d -c". blob, if not nil, is the
// verifier zstd's input comes through: a mismatch there is the error to
// report, and zstd must have read the blob to its end.
func zstd(in io.Reader, blob *verifier) (*toolReader, error) {
	bin, err := exec.LookPath("zstd")
	if err != nil {
		return nil, fmt.Errorf("the layer is zstd-compressed and needs the zstd command; install the zstd package: %w", ErrNoDecompressor)
	}
	cmd := exec.Command(bin, "-d", "-c", "-q")
	cmd.Stdin = in
	t := &toolReader{cmd: cmd, blob: blob, stderr: &tarentry.HeadBuffer{Max: 512}}
	cmd.Stderr = t.stderr
	if t.out, err = cmd.StdoutPipe(); err != nil {
		return nil, fmt.Errorf("decompressing zstd: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("decompressing zstd: starting zstd: %w", err)
	}
	return t, nil
}

// toolReader is the output of a decompressing command. At the end of its
// output it waits for the command and reports how it went.
type toolReader struct {
	cmd    *exec.Cmd
	out    io.Reader
	stderr *tarentry.HeadBuffer
	blob   *verifier
	done   bool
	err    error
}

var errClosed = errors.New("layer stream closed")

func (t *toolReader) Read(p []byte) (int, error) {
	if t.done {
		return 0, t.err
	}
	n, err := t.out.Read(p)
	if err == io.EOF {
		t.done = true
		if t.err = t.wait(); t.err == nil {
			t.err = io.EOF
		}
		return n, t.err
	}
	return n, err
}

func (t *toolReader) wait() error {
	err := t.cmd.Wait()
	// Wait has also waited for the goroutine that feeds zstd from blob.
	if t.blob != nil && t.blob.err != nil && t.blob.err != io.EOF {
		return t.blob.err
	}
	if err != nil {
		if msg := strings.TrimSpace(t.stderr.String()); msg != "" {
			return fmt.Errorf("decompressing zstd: %w: %s", err, msg)
		}
		return fmt.Errorf("decompressing zstd: %w", err)
	}
	if t.blob != nil && t.blob.err != io.EOF {
		return fmt.Errorf("decompressing zstd: zstd ended before the end of %s", t.blob.what)
	}
	return nil
}

func (t *toolReader) Close() error {
	if !t.done {
		t.done, t.err = true, errClosed
		t.cmd.Process.Kill()
		t.cmd.Wait()
	}
	return nil
}
