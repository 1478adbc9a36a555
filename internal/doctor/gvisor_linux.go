package doctor

import (
	"context"
	"debug/buildinfo"
	"os"

	"github.com/pinfold/pinfold/sandbox/gvisor"
)

// gvisorCheck is "gvisor": where runsc is, the gVisor version it was
// built from and the platform pinfold runs it with. An optional backend:
// a missing runsc is a warning.
func gvisorCheck(ctx context.Context) Check {
	c := Check{ID: "gvisor", Title: "gVisor (backend gvisor)"}
	path, err := gvisor.FindRunsc()
	if err != nil {
		c.Status = Warn
		c.Detail = "runsc not found (optional: pinfold's own sandbox does not need it)"
		c.Fix = "to use backend: gvisor, build runsc (CGO_ENABLED=0 go install gvisor.dev/gvisor/runsc@VERSION) and set " + gvisor.RunscEnv + " to it or put it beside pinfold"
		return c
	}
	version := "an unknown version"
	if bi, err := buildinfo.ReadFile(path); err == nil && bi.Main.Version != "" {
		version = "gVisor " + bi.Main.Version
	}
	platform := "platform " + gvisor.Platform + " (needs neither KVM nor ptrace)"
	c.Status = Pass
	c.Detail = path + ", " + version + ", " + platform
	if os.Geteuid() != 0 {
		c.Status = Warn
		c.Detail += "; the gvisor backend runs as root only"
		c.Fix = "run pinfold as root to use backend: gvisor"
	}
	return c
}
