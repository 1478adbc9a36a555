package cli

import (
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/pack"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/sandbox"
)

// appMounts refuses a run of app whose workspace, capture or mount (-v,
// a cache, a secret) would be mounted over the app's own files: its
// working directory, its packed workspace, or any path of its image.
// What runs must be what the app holds (and what its signature covers),
// never a host directory that happens to sit at the same path.
func appMounts(app *pack.Archive, p *plan.Plan) error {
	if app == nil {
		return nil
	}
	type mount struct{ target, what string }
	var ms []mount
	if p.Sandbox.Workspace != "" && p.Sandbox.Access != sandbox.AccessNone {
		ms = append(ms, mount{p.Sandbox.Workspace, "the workspace"})
	}
	for _, c := range p.Captures {
		ms = append(ms, mount{c, "the captured directory"})
	}
	for _, m := range p.Sandbox.Mounts {
		ms = append(ms, mount{m.Target, "the mount of " + m.Source})
	}
	refuse := func(m mount, why string) error {
		return fault.New(fault.AppMount, m.what+" at "+m.target+" would cover "+why,
			"a run of an app runs the files the app holds, never a host directory mounted over them",
			"run it from another directory or pass --workspace DIR (or --access none), and give --mount a target the app's image does not have", nil)
	}
	// The app's own directories first: they need no reading.
	for _, m := range ms {
		if why := app.CoversOwn(m.target); why != "" {
			return refuse(m, why)
		}
	}
	if len(ms) == 0 {
		return nil
	}
	paths, err := app.ImagePaths()
	if err != nil {
		return fault.New(fault.BadApp, "cannot read the app "+app.Path+": "+err.Error(), "", "make it again with pinfold pack app", err)
	}
	for _, m := range ms {
		if why := app.Covers(m.target, paths); why != "" {
			return refuse(m, why)
		}
	}
	return nil
}
