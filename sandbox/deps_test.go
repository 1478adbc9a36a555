package sandbox_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/pinfold/pinfold/"

// goList runs go list with args and returns its output's fields.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
	}
	return strings.Fields(string(out))
}

// TestSandboxImportsOnlyTheStandardLibrary: the public API names no
// internal package and pulls in nothing a library user would not expect.
func TestSandboxImportsOnlyTheStandardLibrary(t *testing.T) {
	for _, p := range goList(t, "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", module+"sandbox") {
		if p != module+"sandbox" {
			t.Errorf("package sandbox depends on %s", p)
		}
	}
}

// TestRuntimesImportNothingAbove: the runtimes sit below the engine and
// every front end. What they may use are the mechanisms (cgroup, seccomp,
// the store, the network stack's client, the init protocol, the app
// file's format, the preflight...), never the layers that plan, run or
// present a sandbox, nor the heavy libraries that live in the helper
// binaries. The list is of whole dependency graphs: internal/pack, which
// the native runtime reads apps with, may not reach trust either.
func TestRuntimesImportNothingAbove(t *testing.T) {
	forbidden := []string{
		module + "internal/cli", module + "internal/engine", module + "internal/server",
		module + "internal/session", module + "internal/plan", module + "internal/config",
		module + "internal/doctor", module + "internal/trust", module + "internal/packer",
		module + "internal/suggest", module + "internal/conformance", module + "internal/capability",
		module + "internal/netstack", module + "client", module + "cmd/",
		"gvisor.dev/", "k8s.io/", "github.com/google/go-containerregistry/",
		"github.com/coder/websocket", "github.com/gorilla/websocket", "net/http",
	}
	for _, line := range goList(t, "-deps", "-f", "{{.ImportPath}}", "./...") {
		for _, f := range forbidden {
			if line == f || strings.HasSuffix(f, "/") && strings.HasPrefix(line, f) || strings.HasPrefix(line, f+"/") {
				t.Errorf("sandbox/... depends on %s", line)
			}
		}
	}
}
