package changeset

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// statChangeset makes the upper directory of n added small text files
// (written straight into the upper directory, which is what the overlay
// does for new files) and returns its roots.
func statChangeset(b *testing.B, n int) []Root {
	b.Helper()
	d := b.TempDir()
	r := Root{Lower: filepath.Join(d, "lower"), Upper: filepath.Join(d, "upper")}
	os.Mkdir(r.Lower, 0o755)
	for i := range n {
		p := filepath.Join(r.Upper, fmt.Sprintf("dir%02d/file%05d.txt", i%50, i))
		if i%50 == i {
			os.MkdirAll(filepath.Dir(p), 0o755)
		}
		if err := os.WriteFile(p, fmt.Appendf(nil, "package p%d\n\nfunc F() int {\n\treturn %d\n}\n", i, i), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return []Root{r}
}

func BenchmarkStat10k(b *testing.B) {
	roots := statChangeset(b, 10000)
	es, err := Scan(context.Background(), roots)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if err := WriteStat(io.Discard, roots, es, DiffOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkScanStat10k(b *testing.B) {
	roots := statChangeset(b, 10000)
	for b.Loop() {
		es, err := Scan(context.Background(), roots)
		if err != nil {
			b.Fatal(err)
		}
		if err := WriteStat(io.Discard, roots, es, DiffOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDiff10k(b *testing.B) {
	roots := statChangeset(b, 10000)
	es, err := Scan(context.Background(), roots)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := WriteDiff(io.Discard, roots, es, DiffOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkScan10k(b *testing.B) {
	roots := statChangeset(b, 10000)
	for b.Loop() {
		if _, err := Scan(context.Background(), roots); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkScanTypes10k(b *testing.B) {
	roots := statChangeset(b, 10000)
	for b.Loop() {
		if _, err := ScanTypes(context.Background(), roots); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFingerprint10k(b *testing.B) {
	roots := statChangeset(b, 10000)
	es, err := ScanTypes(context.Background(), roots)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Fingerprint(roots, es, true); err != nil {
			b.Fatal(err)
		}
	}
}
