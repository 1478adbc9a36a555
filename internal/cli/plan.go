package cli

import (
	"context"
	"fmt"
)

const planUsage = `Usage: pinfold plan [flags] [--] COMMAND [ARGS...]

Prints what 'pinfold run' would do for COMMAND, and where every setting
came from: the backend and base, the workspace and mounts, limits,
security settings, the environment (secret values masked), pre_run hooks,
and the profile and rule that pinfold.yaml chose. Nothing runs. It takes
every flag of 'pinfold run'.

Flags:
`

func planMain(ctx context.Context, io *IO, args []string) int {
	var o runOptions
	fs := runFlags("plan", &o)
	rest, err := fs.Parse(args)
	if err != nil {
		return fail(io, err)
	}
	if fs.help {
		fmt.Fprint(io.Stdout, planUsage)
		fs.Usage(io.Stdout)
		return 0
	}
	p, err := resolve(ctx, engineFor(io), &o, rest)
	if err != nil {
		return fail(io, classify(err, nil))
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
