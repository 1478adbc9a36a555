package conformance_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/pinfold/pinfold/internal/conformance"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/container"
)

func containerTarget(t *testing.T, engine func(...container.Option) *container.Runtime) conformance.Target {
	rt := engine()
	if os.Geteuid() != 0 {
		t.Skip("the conformance suite runs as root (limits, test hosts in network namespaces)")
	}
	if err := rt.Check(context.Background(), nil); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v", err) // CI installs both engines: a failed check is a failure
		}
		t.Skipf("%v", err)
	}
	on := func(store string) sandbox.Runtime { return engine(container.WithStore(store)) }
	return conformance.Target{Backend: rt.Name(), Runtime: on, Pinfold: filepath.Join(tools, "pinfold"), Tools: tools,
		Leftovers: rt.Leftovers}
}

func TestPodman(t *testing.T) {
	conformance.Run(t, containerTarget(t, container.Podman))
}

func TestDocker(t *testing.T) {
	if dockerErr != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(dockerErr)
		}
		t.Skip(dockerErr)
	}
	conformance.Run(t, containerTarget(t, container.Docker))
}
