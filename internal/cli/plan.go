package cli

import (
	"context"
	"errors"

	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/plan"
)

func planCommand() command {
	return command{name: "plan", summary: "print what run would do, and why", use: "plan [flags] [--] COMMAND [ARGS...]",
		long: `Prints what 'pinfold run' would do for COMMAND, and where every setting
came from: the backend and base, the system (base id, capabilities and
sandbox id) for bases pinfold builds, the workspace, changeset and mounts,
limits, security settings, the environment (secret values masked),
pre_run hooks, and the profile and rule that pinfold.yaml chose. Nothing
runs. 'pinfold plan APP.pinfold' plans the app as 'pinfold run APP.pinfold'
runs it. It takes every flag of 'pinfold run'.`,
		setup: func(fs *flagSet) runner {
			var o runOptions
			runFlags(fs, "plan", &o)
			return func(ctx context.Context, io *IO, args []string) int { return planMain(ctx, io, &o, args) }
		}}
}

func planMain(ctx context.Context, io *IO, o *runOptions, rest []string) int {
	// An app is planned as run APP would run it: its image as the base,
	// its command, environment and working directory.
	rest, err := appRun(o, rest)
	if err != nil {
		return fail(io, err)
	}
	p, err := resolve(ctx, engineFor(io), o, rest)
	// plan shows what the policy would refuse; only run refuses it.
	var refused *plan.Refused
	if errors.As(err, &refused) {
		p, err = refused.Plan, nil
		p.Refused = refusalText(refused.Err)
	}
	if err != nil {
		return fail(io, engine.Classify(err, nil))
	}
	if err := appMounts(o.app, p); err != nil {
		return fail(io, err)
	}
	if o.json {
		if err := p.JSON(io.Stdout); err != nil {
			return fail(io, err)
		}
		return 0
	}
	p.Text(io.Stdout)
	return 0
}

// refusalText is a refusal as the plan prints it: code, what, and fix.
func refusalText(err error) string {
	var fe *fault.Error
	if !errors.As(err, &fe) {
		return err.Error()
	}
	t := string(fe.Code) + " " + fe.What
	if fe.Fix != "" {
		t += " (fix: " + fe.Fix + ")"
	}
	return t
}
