package agent

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/pinfold/pinfold/internal/helper"
	"github.com/pinfold/pinfold/sandbox"
)

// Binary finds pinfold's binary, which a session's agent is: PINFOLD_AGENT,
// the running binary when it is pinfold (it is beside itself), a pinfold
// beside it, or one on PATH.
func Binary() (string, error) {
	if p, err := helper.Find("pinfold", "PINFOLD_AGENT"); err == nil {
		return p, nil
	}
	return "", errors.New("a session runs pinfold's binary inside as its agent, and none was found (this program is not pinfold, none is beside it or on PATH): install pinfold (scripts/setup.sh), or set PINFOLD_AGENT to its path")
}

// SessionDirs makes the run and home directories of a session's host
// directory dir and returns spec's mounts with the session's added: the
// agent (pinfold's binary exe), the run directory (its socket) and the
// home. ro marks the two directories read-only, for a runtime that copies
// them into the sandbox rather than binding them (kubernetes).
func SessionDirs(dir, exe string, mounts []sandbox.Mount, ro bool) ([]sandbox.Mount, error) {
	for _, d := range []string{"run", "home"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	return append(append([]sandbox.Mount(nil), mounts...),
		sandbox.Mount{Source: exe, Target: AgentPath, ReadOnly: true},
		sandbox.Mount{Source: filepath.Join(dir, "run"), Target: RunDir, ReadOnly: ro},
		sandbox.Mount{Source: filepath.Join(dir, "home"), Target: Home, ReadOnly: ro}), nil
}
