package engine

import (
	"context"
	"errors"
	"strings"

	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/internal/preflight"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/kubernetes"
)

// AutoOrder is the order in which backend auto tries the runtimes:
// pinfold's own sandbox first (no daemon, the fastest start), then the
// container engines. The host is never among them: running unsandboxed is
// not a fallback pinfold takes on its own.
var AutoOrder = []string{"native", "podman", "docker"}

// Probe is what one runtime's checks found.
type Probe struct {
	Backend string `json:"backend"`
	// Usable: the runtime can run the plan probed (or, without a plan, a
	// plain sandbox).
	Usable bool `json:"usable"`
	// Why it cannot, and how to fix that.
	Problem string `json:"problem,omitempty"`
	Fix     string `json:"fix,omitempty"`
	err     error
}

// Probe runs each backend of AutoOrder's checks for p (nil: a plain
// sandbox), in order: what backend auto and pinfold doctor show.
func (e *Engine) Probe(ctx context.Context, p *plan.Plan) []Probe {
	spec := &sandbox.Spec{}
	cmd := &sandbox.Cmd{}
	if p != nil {
		spec = &p.Sandbox
		cmd = &sandbox.Cmd{TTY: p.TTY, Timeout: p.Timeout}
	}
	var probes []Probe
	for _, name := range AutoOrder {
		pr := Probe{Backend: name}
		rt, err := e.runtime(name)
		if err != nil {
			pr.Problem, pr.err = "not available in this build of pinfold", err
			probes = append(probes, pr)
			continue
		}
		f := rt.Features()
		if err := f.Supports(name, spec, cmd); err != nil {
			pr.Problem, pr.err = err.Error(), err
			var ue *sandbox.UnsupportedError
			if errors.As(err, &ue) {
				pr.Problem = "cannot enforce the " + ue.Feature + " asked for (" + ue.Asked + ")"
			}
		} else if err := rt.Check(ctx, spec); err != nil {
			pr.Problem, pr.Fix, pr.err = err.Error(), "", err
			var ce *sandbox.CheckError
			if errors.As(err, &ce) {
				pr.Problem, pr.Fix = ce.What, ce.Fix
				var pe *preflight.Error
				if errors.As(err, &pe) {
					pr.Problem, pr.Fix = preflightText(pe)
				}
			}
		} else {
			pr.Usable = true
		}
		probes = append(probes, pr)
	}
	return probes
}

// selectBackend implements "backend: auto": the first runtime of
// AutoOrder that can run the plan. The plan says which and why; when
// none can, the error lists why each cannot.
func (e *Engine) selectBackend(ctx context.Context, p *plan.Plan) error {
	var tried, fixes []string
	for _, pr := range e.Probe(ctx, p) {
		if pr.Usable {
			p.Backend = pr.Backend
			p.BackendReason = "auto: " + pr.Backend + " is the first of " + strings.Join(AutoOrder, ", ") + " that can run it"
			if len(tried) > 0 {
				p.BackendReason += " (" + strings.Join(tried, "; ") + ")"
			}
			return nil
		}
		tried = append(tried, pr.Backend+": "+pr.Problem)
		if pr.Fix != "" {
			fixes = append(fixes, pr.Backend+": "+pr.Fix)
		}
	}
	return fault.New(fault.Preflight, "backend auto found no backend that can run this plan", strings.Join(tried, "; "),
		strings.Join(append(fixes, "pinfold doctor shows more"), "; "), nil)
}

// preflightText is a failed native preflight in two lines.
func preflightText(pe *preflight.Error) (problem, fix string) {
	var what, fixes []string
	for _, c := range pe.Checks {
		what = append(what, c.Title+": "+c.Detail)
		if c.Fix != "" {
			fixes = append(fixes, c.Fix)
		}
	}
	return strings.Join(what, "; "), strings.Join(fixes, "; ")
}

// ProbeKubernetes checks the kubernetes backend's cluster (pinfold
// doctor), when one is configured; configured is false otherwise. Backend
// auto never tries it: a cluster is never a fallback for this machine.
func (e *Engine) ProbeKubernetes(ctx context.Context) (pr Probe, configured bool) {
	pr = Probe{Backend: kubernetes.Name}
	rt, err := e.runtime(kubernetes.Name)
	if err != nil {
		pr.Problem, pr.err = "not available in this build of pinfold", err
		return pr, true
	}
	if k, ok := rt.(*kubernetes.Runtime); ok && !k.Configured() {
		return pr, false
	}
	if err := rt.Check(ctx, nil); err != nil {
		pr.Problem, pr.err = err.Error(), err
		var ce *sandbox.CheckError
		if errors.As(err, &ce) {
			pr.Problem, pr.Fix = ce.What, ce.Fix
		}
		return pr, true
	}
	pr.Usable = true
	return pr, true
}
