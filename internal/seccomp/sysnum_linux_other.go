//go:build linux && !amd64 && !arm64

package seccomp

// abis is empty: the package has no syscall table for this architecture,
// and Program returns ErrUnsupportedArch.
func abis() []abi { return nil }
