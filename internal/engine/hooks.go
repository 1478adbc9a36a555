package engine

import (
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/sandbox"
)

// runHooks runs the plan's pre_run hooks on the host, in the workspace;
// the first failure aborts the run. Their output goes to the caller's
// stderr: they are part of what the user asked for.
func (e *Engine) runHooks(ctx context.Context, p *plan.Plan, o Options) error {
	out := o.Stderr
	if out == nil {
		out = io.Discard
	}
	for _, h := range p.Hooks {
		cmd := exec.CommandContext(ctx, h.Args[0], h.Args[1:]...)
		cmd.Dir = p.Sandbox.Workspace
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Run(); err != nil {
			text := h.Shell
			if text == "" {
				text = strings.Join(h.Args, " ")
			}
			return fault.New(fault.HookFailed, "pre_run hook failed: "+text, err.Error()+" (hook from "+h.From+")",
				"fix what the hook checks, or remove it from pre_run", err)
		}
	}
	return nil
}

// makeCaches creates the plan's cache directories in the store, owned by
// the workspace's owner so that the command can write them.
func (e *Engine) makeCaches(p *plan.Plan) error {
	var owner *syscall.Stat_t
	for _, c := range p.Caches {
		if err := os.MkdirAll(c.Source, 0o700); err != nil {
			return &sandbox.SpecError{Field: "store", Err: err}
		}
		if os.Geteuid() == 0 {
			if owner == nil {
				owner = &syscall.Stat_t{}
				if err := syscall.Stat(p.Sandbox.Workspace, owner); err != nil {
					return &sandbox.SpecError{Field: "workspace", Err: err}
				}
			}
			if err := os.Lchown(c.Source, int(owner.Uid), int(owner.Gid)); err != nil {
				return &sandbox.SpecError{Field: "store", Err: err}
			}
		}
	}
	return nil
}
