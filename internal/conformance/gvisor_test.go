package conformance_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/pinfold/pinfold/internal/conformance"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/gvisor"
)

// TestGVisor runs the suite on runsc (PINFOLD_RUNSC, or beside pinfold,
// or on the PATH: scripts/test-setup.sh builds it). On CI a missing
// runsc fails the suite.
func TestGVisor(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the conformance suite runs as root (limits, test hosts in network namespaces)")
	}
	if os.Getenv(gvisor.RunscEnv) == "" {
		if p := "/var/cache/pinfold-tools/runsc"; fileExists(p) {
			t.Setenv(gvisor.RunscEnv, p)
		}
	}
	rt := gvisor.NewRuntime()
	if err := rt.Check(context.Background(), nil); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	conformance.Run(t, conformance.Target{Backend: gvisor.Name,
		Runtime: func(store string) sandbox.Runtime { return gvisor.NewRuntime(gvisor.WithStore(store)) },
		Pinfold: filepath.Join(tools, "pinfold"), Tools: tools, Leftovers: gvisor.Leftovers,
		GuestKernel: "gVisor's Sentry answers the command's system calls: the ids it sees are its own kernel's, and its Sentry and gofer run as the sandbox range (TestHostIDs in sandbox/gvisor)",
		TTYUnnamed:  "runsc gives the command a host terminal, which gVisor's kernel shows as a host descriptor, not as one of its /dev/pts"})
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
