package packer

import (
	"bytes"
	"compress/gzip"
	"io"
	"math/rand/v2"
	"runtime"
	"testing"
)

// TestParallelGzip: any reader of gzip reads the members as the input,
// and the bytes do not depend on how many CPUs compressed them.
func TestParallelGzip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{0, 1, blockSize - 1, blockSize, blockSize + 1, 3*blockSize + 12345} {
		in := make([]byte, size)
		for i := range in {
			in[i] = byte(r.IntN(16)) // compressible, not trivially
		}
		var outs [][]byte
		for _, procs := range []int{1, 4} {
			old := runtime.GOMAXPROCS(procs)
			var out bytes.Buffer
			z := newParallelGzip(&out)
			// Odd write sizes cross block boundaries.
			for p := in; len(p) > 0; {
				k := min(len(p), 70001)
				z.Write(p[:k])
				p = p[k:]
			}
			if err := z.Close(); err != nil {
				t.Fatal(err)
			}
			runtime.GOMAXPROCS(old)
			outs = append(outs, out.Bytes())
			zr, err := gzip.NewReader(bytes.NewReader(out.Bytes()))
			if err != nil {
				t.Fatalf("size %d: %v", size, err)
			}
			got, err := io.ReadAll(zr)
			if err != nil || !bytes.Equal(got, in) {
				t.Fatalf("size %d, %d CPUs: read back %d bytes (%v), want %d", size, procs, len(got), err, size)
			}
		}
		if !bytes.Equal(outs[0], outs[1]) {
			t.Errorf("size %d: 1 and 4 CPUs give different bytes", size)
		}
	}
}
