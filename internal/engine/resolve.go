package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/pinfold/pinfold/internal/config"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/landlock"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/sandbox"
)

// Request is what a caller asks to run, before policy applies.
type Request struct {
	Args  []string
	Flags plan.Flags
	// Config is the pinfold.yaml to use; "" finds one walking up from Cwd.
	Config string
	// NoConfig reads no pinfold.yaml at all, neither Config nor one found
	// walking up: the plan is the flags' alone. The server sets it for a
	// tenant's session, whose workspace the tenant and its sandbox write.
	NoConfig bool
	// Cwd is the caller's directory; "" is the process's.
	Cwd string
	// Frozen refuses capabilities that inference finds but the config does
	// not list (--frozen, CI=true).
	Frozen bool
}

// Resolve makes the complete Plan of a request: the config in effect and
// the flags resolved (plan.Resolve), the backend chosen when it is auto,
// and, for bases pinfold builds, the system the sandbox is made of (its
// capabilities, with those inferred from the workspace, and its sandbox
// id). Nothing is built or run.
func (e *Engine) Resolve(ctx context.Context, r *Request) (*plan.Plan, error) {
	cwd := r.Cwd
	if cwd == "" {
		cwd, _ = os.Getwd()
	}
	if real, err := filepath.EvalSymlinks(cwd); err == nil {
		cwd = real
	}
	path := r.Config
	var err error
	if r.NoConfig && path != "" {
		return nil, fault.New(fault.ConfigError, "a config file was given where none may be read ("+path+")", "", "", nil)
	}
	var cfg *config.File
	var ignored string
	switch {
	case r.NoConfig:
	case path == "":
		d, err := config.Discover(cwd)
		if err != nil {
			return nil, configError(err)
		}
		if d.Ignored != nil {
			// Said once per plan: a policy someone else could have written
			// is not run, and the caller learns why nothing applies.
			ignored = d.Ignored.Path + ": " + d.Ignored.Why
			e.notice("%s", d.Ignored.Message())
		}
		if d.Path != "" {
			if cfg, err = config.LoadDiscovered(d.Path); err != nil {
				return nil, configError(err)
			}
		}
	default:
		if cfg, err = config.Load(path); err != nil {
			return nil, configError(err)
		}
	}
	home, _ := os.UserHomeDir()
	p, err := plan.Resolve(&plan.Request{Args: r.Args, Flags: r.Flags, Config: cfg, Cwd: cwd, Home: home,
		Store: e.Store, Getenv: os.LookupEnv, Environ: os.Environ(), Exists: exists, Term: os.Getenv("TERM")})
	// A plan the policy refuses is still completed, for pinfold plan to
	// show; it is returned only inside the refusal.
	var refused *plan.Refused
	if errors.As(err, &refused) {
		p, err = refused.Plan, nil
	}
	if err != nil {
		return nil, err
	}
	p.Audit.ConfigIgnored = ignored
	if p.Backend == "auto" {
		if err := e.selectBackend(ctx, p); err != nil {
			return nil, err
		}
	}
	if p.Mode == "sandbox" && (p.Sandbox.Base.Kind == sandbox.BaseDebian12 || len(p.Capabilities) > 0) {
		// Without a usable store the ids stay unknown; the run reports it.
		st, _ := e.OpenStore()
		sys, err := e.Describe(ctx, st, p)
		if err != nil {
			return nil, err
		}
		if r.Frozen {
			if err := checkFrozen(p, sys); err != nil {
				return nil, err
			}
		}
		p.System = sys
	}
	if p.Mode == "sandbox" && p.Backend == "native" {
		p.Layers = landlock.Layers()
	}
	if refused != nil {
		return nil, refused
	}
	return p, nil
}

func configError(err error) error {
	var ce *config.Error
	if errors.As(err, &ce) {
		return fault.New(fault.ConfigError, ce.Error(), "", "fix the file (see docs/config.md), or pass --config", err)
	}
	return err
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
