// Package helper finds pinfold's helper binaries (pinfold-net,
// pinfold-api, pinfold-pack, pinfold-kube) and pinfold itself, which a
// helper or a session's agent runs: one lookup, so that every binary is
// found the same way. The order is the environment variable that names
// it, then beside the running binary, then on PATH.
package helper

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// ErrNotFound is wrapped by Find's error when there is no such binary.
var ErrNotFound = errors.New("not found")

// Find returns the path of the binary name: the value of the environment
// variable env when it is set (env "" has none), else the regular file
// name (name.exe on Windows) beside the running binary (the binary a symbolic link points to,
// then the link), else name on PATH.
func Find(name, env string) (string, error) {
	if env != "" {
		if p := os.Getenv(env); p != "" {
			return p, nil
		}
	}
	file := name
	if runtime.GOOS == "windows" {
		file += ".exe"
	}
	if exe, err := os.Executable(); err == nil {
		dirs := []string{filepath.Dir(exe)}
		if real, err := filepath.EvalSymlinks(exe); err == nil && filepath.Dir(real) != dirs[0] {
			dirs = []string{filepath.Dir(real), dirs[0]}
		}
		for _, d := range dirs {
			p := filepath.Join(d, file)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				return p, nil
			}
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s is neither beside this program nor on PATH: %w", name, ErrNotFound)
}
