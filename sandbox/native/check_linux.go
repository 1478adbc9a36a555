package native

import (
	"context"

	"github.com/pinfold/pinfold/internal/cgroup"
	"github.com/pinfold/pinfold/internal/preflight"
	"github.com/pinfold/pinfold/sandbox"
)

// Check runs the preflight for spec: that this user can create the
// sandbox's namespaces and, when spec has limits, that cgroups can enforce
// them. A pass is cached per boot (see internal/preflight); a failure
// wraps a *preflight.Error naming each failed check and its fix.
func (r *Runtime) Check(ctx context.Context, spec *sandbox.Spec) error {
	l := spec.Limits
	need := preflight.Needs{Native: true, Limits: l.Memory > 0 || l.Pids > 0 || l.CPUs > 0,
		Limit: cgroup.Limits{MemoryBytes: l.Memory, Pids: l.Pids, CPUs: l.CPUs}}
	if err := preflight.Run(ctx, need); err != nil {
		return &sandbox.CheckError{Runtime: Name, What: "this host cannot run native sandboxes as asked",
			Fix: "see pinfold doctor", Err: err}
	}
	return nil
}
