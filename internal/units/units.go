// Package units reads and prints the sizes and durations that pinfold's
// flags and pinfold.yaml share ("512m", "2g", "1m30s", "90").
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ParseSize reads a size like 512, 64k, 256m, 2g, 1.5G or 512MiB (binary
// units, as in podman and docker).
func ParseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "b"), "i")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			mult = 1 << 10
		case 'm':
			mult = 1 << 20
		case 'g':
			mult = 1 << 30
		case 't':
			mult = 1 << 40
		}
		if mult > 1 {
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || !(v >= 0) || v*float64(mult) > 1<<62 { // !(v >= 0) also refuses NaN
		return 0, fmt.Errorf("invalid size %q", s)
	}
	return int64(v * float64(mult)), nil
}

// FormatSize prints a byte count the way ParseSize reads it.
func FormatSize(n int64) string {
	units := [...]struct {
		s string
		v int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}}
	for _, u := range units {
		if n >= u.v && n%u.v == 0 {
			return strconv.FormatInt(n/u.v, 10) + u.s
		}
	}
	if n >= 1<<20 {
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + "MiB"
	}
	return strconv.FormatInt(n, 10) + "B"
}

// ParseDuration reads a Go duration ("1m30s") or a number of seconds.
func ParseDuration(s string) (time.Duration, error) {
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		if d := n * float64(time.Second); d != d || d > math.MaxInt64 || d < math.MinInt64 {
			return 0, fmt.Errorf("invalid duration %q", s) // NaN, Inf or out of range
		}
		return time.Duration(n * float64(time.Second)), nil
	}
	return time.ParseDuration(s)
}
