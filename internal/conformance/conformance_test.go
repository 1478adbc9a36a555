package conformance_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/pinfold/pinfold/internal/conformance"
	"github.com/pinfold/pinfold/internal/nettest"
	"github.com/pinfold/pinfold/sandbox/native"
)

// tools holds pinfold and netclient, built once.
var tools string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pinfold-conformance-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Chmod(dir, 0o755)
	args := []string{"build", "-o", filepath.Join(dir, "pinfold")}
	if runtime.GOARCH == "amd64" {
		args = append(args, "-ldflags=-E pinfold_entry")
	}
	build := exec.Command("go", append(args, "github.com/pinfold/pinfold/cmd/pinfold")...)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building pinfold: %v\n%s", err, out)
		os.Exit(1)
	}
	if _, err := nettest.BuildClient(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tools = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestNative(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the conformance suite runs as root (limits, test hosts in network namespaces)")
	}
	conformance.Run(t, conformance.Target{Backend: native.Name, Runtime: native.NewRuntime(),
		Pinfold: filepath.Join(tools, "pinfold"), Tools: tools})
}
