package agent

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
)

// Binary finds pinfold's binary, which a session's agent is: PINFOLD_AGENT,
// the running binary when it is pinfold, a pinfold beside it, or one on
// PATH.
func Binary() (string, error) {
	if p := os.Getenv("PINFOLD_AGENT"); p != "" {
		return p, nil
	}
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		if filepath.Base(exe) == "pinfold" {
			return exe, nil
		}
		if p := filepath.Join(filepath.Dir(exe), "pinfold"); isFile(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath("pinfold"); err == nil {
		return p, nil
	}
	return "", errors.New("a session needs pinfold's binary for its agent: set PINFOLD_AGENT")
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}
