package seccomp

import (
	"syscall"
	"testing"
)

func archProbes() []probe { return nil }

// elfProbe is a call made by a 32-bit x86 program; arm64 runs none.
type elfProbe struct {
	name   string
	want   syscall.Errno
	denied bool
}

func i386Programs(*testing.T) ([]elfProbe, []string) { return nil, nil }
