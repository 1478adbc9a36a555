//go:build linux && !amd64 && !arm64

package seccomp

import (
	"errors"
	"testing"
)

func TestUnsupportedArch(t *testing.T) {
	if _, err := Default().Program(); !errors.Is(err, ErrUnsupportedArch) {
		t.Fatalf("Program() error = %v, want ErrUnsupportedArch", err)
	}
}
