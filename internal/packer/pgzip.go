package packer

import (
	"bytes"
	"io"
	"runtime"
	"sync"

	"github.com/klauspost/compress/gzip"
)

// blockSize is how much of a layer's tar each gzip member holds. Fixed,
// like the level: the bytes depend on it, never on how many CPUs
// compressed them.
const blockSize = 1 << 20

// gzipWriters are reused: a new writer allocates and clears its
// compressor's tables, for every block. Reset gives the same output as a
// new writer of the same level.
var gzipWriters = sync.Pool{New: func() any {
	gz, _ := gzip.NewWriterLevel(nil, Level)
	return gz
}}

// parallelGzip compresses what is written to it as a series of gzip
// members of blockSize input bytes each, compressed on all CPUs and
// written in order: a valid gzip stream (readers take concatenated
// members as one stream, as RFC 1952 allows), the same bytes for the
// same input.
type parallelGzip struct {
	w     io.Writer
	buf   []byte
	queue chan chan []byte // results in input order
	done  chan error
	sem   chan struct{}
	// flushed says a block went out: an empty stream still needs one.
	flushed bool
}

func newParallelGzip(w io.Writer) *parallelGzip {
	n := max(runtime.GOMAXPROCS(0), 1)
	z := &parallelGzip{w: w, buf: make([]byte, 0, blockSize), queue: make(chan chan []byte, 2*n), done: make(chan error, 1), sem: make(chan struct{}, n)}
	go func() {
		var err error
		for r := range z.queue {
			b := <-r
			if err == nil {
				_, err = w.Write(b)
			}
		}
		z.done <- err
	}()
	return z
}

func (z *parallelGzip) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(blockSize-len(z.buf), len(p))
		z.buf = append(z.buf, p[:k]...)
		p = p[k:]
		if len(z.buf) == blockSize {
			z.flush()
		}
	}
	return n, nil
}

// flush hands the buffered block to a worker.
func (z *parallelGzip) flush() {
	block := z.buf
	z.buf = make([]byte, 0, blockSize)
	z.flushed = true
	r := make(chan []byte, 1)
	z.sem <- struct{}{}
	z.queue <- r
	go func() {
		defer func() { <-z.sem }()
		var out bytes.Buffer
		out.Grow(len(block) / 2)
		gz := gzipWriters.Get().(*gzip.Writer)
		gz.Reset(&out)
		gz.Write(block)
		gz.Close()
		gzipWriters.Put(gz)
		r <- out.Bytes()
	}()
}

// Close compresses what is left (an empty stream is one empty member)
// and waits for everything to be written.
func (z *parallelGzip) Close() error {
	if len(z.buf) > 0 || !z.flushed {
		z.flush()
	}
	close(z.queue)
	return <-z.done
}
