package plan

import (
	"path/filepath"
	"strings"

	"github.com/pinfold/pinfold/internal/fault"
)

// resolveInstall applies the install-style policy: role, lockfiles, hooks.
func resolveInstall(r *Request, ls []layer, p *Plan) error {
	p.Audit.Role = "run"
	var lockfiles []string
	require := false
	for i := len(ls) - 1; i >= 0; i-- {
		if v := ls[i].s.Role; v != nil {
			switch *v {
			case "install", "run", "build":
				p.Audit.Role = *v
			default:
				return badValue("role", *v, "install, run or build")
			}
			p.Sources["role"] = ls[i].label("role")
			break
		}
	}
	for i := len(ls) - 1; i >= 0; i-- {
		if ls[i].s.LockfileFiles != nil {
			lockfiles = ls[i].s.LockfileFiles
			p.Sources["lockfile_files"] = ls[i].label("lockfile_files")
			break
		}
	}
	for i := len(ls) - 1; i >= 0; i-- {
		if v := ls[i].s.RequireLockfile; v != nil {
			require = *v
			p.Sources["require_lockfile"] = ls[i].label("require_lockfile")
			break
		}
	}
	for i := len(ls) - 1; i >= 0; i-- {
		if ls[i].s.PreRun == nil {
			continue
		}
		from := ls[i].label("pre_run")
		for _, h := range ls[i].s.PreRun {
			if h.Shell != "" {
				p.Hooks = append(p.Hooks, Hook{Args: []string{"/bin/sh", "-c", h.Shell}, Shell: h.Shell, From: from})
			} else {
				p.Hooks = append(p.Hooks, Hook{Args: h.Args, From: from})
			}
		}
		break
	}
	switch {
	case len(lockfiles) == 0:
		p.Audit.Lockfile = "none configured"
	default:
		var found []string
		for _, lf := range lockfiles {
			if r.Exists != nil && r.Exists(filepath.Join(p.Sandbox.Workspace, lf)) {
				found = append(found, lf)
			}
		}
		if len(found) > 0 {
			p.Audit.Lockfile = "present: " + strings.Join(found, ", ")
		} else {
			p.Audit.Lockfile = "missing: none of " + strings.Join(lockfiles, ", ")
			if require && p.Audit.Role == "install" {
				e := fault.New(fault.LockfileMissing,
					"refusing to install without a lockfile in "+p.Sandbox.Workspace,
					"the profile requires one of "+strings.Join(lockfiles, ", ")+" (require_lockfile: true), so that "+
						"an install only fetches what was reviewed",
					"commit a lockfile"+lockfileHint(lockfiles)+", or set require_lockfile: false for this profile", nil)
				return &Refused{Plan: p, Err: e}
			}
		}
	}
	return nil
}

// lockfileMakers says how each well-known lockfile is made.
var lockfileMakers = map[string]string{
	"package-lock.json":   "npm install --package-lock-only",
	"npm-shrinkwrap.json": "npm shrinkwrap",
	"yarn.lock":           "yarn install --mode update-lockfile",
	"pnpm-lock.yaml":      "pnpm install --lockfile-only",
	"bun.lock":            "bun install --lockfile-only",
	"poetry.lock":         "poetry lock",
	"uv.lock":             "uv lock",
	"Pipfile.lock":        "pipenv lock",
	"Cargo.lock":          "cargo generate-lockfile",
	"go.sum":              "go mod tidy",
	"Gemfile.lock":        "bundle lock",
	"composer.lock":       "composer update --lock",
	"requirements.txt":    "pip freeze > requirements.txt",
	"pylock.toml":         "pip lock",
}

// lockfileHint names the commands that make the profile's lockfiles, for
// those pinfold knows: a profile of pip's is not told to run npm.
func lockfileHint(lockfiles []string) string {
	var how []string
	for _, lf := range lockfiles {
		if m, ok := lockfileMakers[filepath.Base(lf)]; ok {
			how = append(how, m)
		}
	}
	if len(how) == 0 {
		return " (made by your package manager, run outside this policy)"
	}
	return " (" + strings.Join(how, ", or ") + ", run outside this policy)"
}
