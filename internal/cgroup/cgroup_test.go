package cgroup

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestLimitsValidate(t *testing.T) {
	tests := []struct {
		name    string
		l       Limits
		wantErr string // substring; "" for valid
	}{
		{"zero", Limits{}, ""},
		{"all", Limits{MemoryBytes: 32 << 20, Pids: 16, CPUs: 0.5}, ""},
		{"memory-minimum", Limits{MemoryBytes: MinMemoryBytes}, ""},
		{"memory-below-minimum", Limits{MemoryBytes: MinMemoryBytes - 1}, "below the minimum of 4 MiB"},
		{"memory-negative", Limits{MemoryBytes: -1}, "negative"},
		{"pids-one", Limits{Pids: 1}, ""},
		{"pids-negative", Limits{Pids: -3}, "negative"},
		{"cpus-negative", Limits{CPUs: -1}, "positive"},
		{"cpus-nan", Limits{CPUs: math.NaN()}, "positive"},
		{"cpus-inf", Limits{CPUs: math.Inf(1)}, "maximum"},
		{"cpus-tiny", Limits{CPUs: 0.001}, "minimum"},
		{"cpus-minimum", Limits{CPUs: 0.01}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.l.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate() = %v, want ErrInvalid containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestLimitsZero(t *testing.T) {
	if !(Limits{}).Zero() {
		t.Error("Limits{}.Zero() = false")
	}
	for _, l := range []Limits{{MemoryBytes: 1}, {Pids: 1}, {CPUs: 1}} {
		if l.Zero() {
			t.Errorf("%+v.Zero() = true", l)
		}
	}
}

func TestCPUQuota(t *testing.T) {
	for _, tt := range []struct {
		cpus float64
		want int64
	}{{0.5, 50000}, {1, 100000}, {2.5, 250000}, {0.01, 1000}, {1.0 / 3, 33333}} {
		if got := (Limits{CPUs: tt.cpus}).cpuQuotaUs(); got != tt.want {
			t.Errorf("cpuQuotaUs(%g) = %d, want %d", tt.cpus, got, tt.want)
		}
	}
}

func TestValidName(t *testing.T) {
	for _, name := range []string{"a", "box-1", "run_2.x", strings.Repeat("n", maxNameLen)} {
		if err := validName(name); err != nil {
			t.Errorf("validName(%q) = %v, want nil", name, err)
		}
	}
	for _, name := range []string{"", ".", "..", ".hidden", "a/b", "../x", "sp ace", "new\nline", "nul\x00", strings.Repeat("n", maxNameLen+1)} {
		if err := validName(name); !errors.Is(err, ErrInvalid) {
			t.Errorf("validName(%q) = %v, want ErrInvalid", name, err)
		}
	}
}
