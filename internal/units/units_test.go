package units

import (
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"512", 512}, {"64k", 64 << 10}, {"256m", 256 << 20}, {"2g", 2 << 30}, {"1.5G", 3 << 29},
		{"512MiB", 512 << 20}, {"1t", 1 << 40}, {"100mb", 100 << 20}, {" 8M ", 8 << 20}, {"0", 0},
	} {
		if got, err := ParseSize(c.in); err != nil || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "m", "-1m", "1x", "99999999999t", "NaN", "inf", "1 g"} {
		if n, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, n)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for _, c := range []struct {
		in   int64
		want string
	}{
		{256 << 20, "256MiB"}, {1 << 30, "1GiB"}, {1536 << 10, "1536KiB"}, {1000, "1000B"},
		{3 << 40, "3TiB"}, {3<<20 + 1, "3.0MiB"},
	} {
		if got := FormatSize(c.in); got != c.want {
			t.Errorf("FormatSize(%d) = %q, want %q", c.in, got, c.want)
		}
		if c.in%1024 == 0 {
			if back, err := ParseSize(c.want); err != nil || back != c.in {
				t.Errorf("ParseSize(FormatSize(%d)) = %d, %v", c.in, back, err)
			}
		}
	}
}

func TestParseDuration(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
	}{
		{"1m30s", 90 * time.Second}, {"0.5", 500 * time.Millisecond}, {"90", 90 * time.Second}, {"2h", 2 * time.Hour},
	} {
		if got, err := ParseDuration(c.in); err != nil || got != c.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "soon", "NaN", "inf", "1e300", "5 m"} {
		if d, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", in, d)
		}
	}
}
