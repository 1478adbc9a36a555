package native

import (
	"context"

	"github.com/pinfold/pinfold/internal/cgroup"
	"github.com/pinfold/pinfold/internal/doctor"
	"github.com/pinfold/pinfold/sandbox"
)

// Check runs the doctor's preflight for spec: that this user can create
// the sandbox's namespaces and, when spec has limits, that cgroups can
// enforce them. A pass is cached per boot (see doctor.Preflight).
func (r *Runtime) Check(ctx context.Context, spec *sandbox.Spec) error {
	l := spec.Limits
	need := doctor.Needs{Native: true, Limits: l.Memory > 0 || l.Pids > 0 || l.CPUs > 0,
		Limit: cgroup.Limits{MemoryBytes: l.Memory, Pids: l.Pids, CPUs: l.CPUs}}
	if err := doctor.Preflight(ctx, need); err != nil {
		return &sandbox.CheckError{Runtime: Name, What: "this host cannot run native sandboxes as asked",
			Fix: "see pinfold doctor", Err: err}
	}
	return nil
}
