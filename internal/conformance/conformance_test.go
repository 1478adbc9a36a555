package conformance_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/pinfold/pinfold/internal/conformance"
	"github.com/pinfold/pinfold/internal/nettest"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/native"
)

// tools holds pinfold and netclient, built once.
var tools string

// dockerErr says why the docker target has no daemon.
var dockerErr error

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pinfold-conformance-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Chmod(dir, 0o755)
	if _, err := nettest.BuildPinfold(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if _, err := nettest.BuildClient(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tools = dir
	stopDockerd := func() {}
	if os.Geteuid() == 0 {
		dd, _ := os.MkdirTemp("", "pinfold-dockerd-")
		if stop, err := conformance.StartDockerd(dd); err != nil {
			dockerErr = err
		} else {
			stopDockerd = func() { stop(); os.RemoveAll(dd) }
		}
	}
	code := m.Run()
	stopDockerd()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestNative(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the conformance suite runs as root (limits, test hosts in network namespaces)")
	}
	conformance.Run(t, conformance.Target{Backend: native.Name, Runtime: func(store string) sandbox.Runtime {
		return native.NewRuntime(native.WithStore(store))
	},
		Pinfold: filepath.Join(tools, "pinfold"), Tools: tools})
}
