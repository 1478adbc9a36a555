package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// deps returns the packages pkg links, as go list -deps reports them.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// TestHelperExclusions: each heavy dependency lives in one helper binary
// so that pinfold, which starts on every command, never pays for its
// package inits or size. Each case also checks that its helper does link
// the package, so the check cannot pass because a name went stale.
func TestHelperExclusions(t *testing.T) {
	pinfold := deps(t, "github.com/pinfold/pinfold/cmd/pinfold")
	for _, c := range []struct {
		name   string
		helper string // the binary that links it instead
		prefix string // a package path, or a prefix ending in "/"
	}{
		{"gVisor netstack", "pinfold-net", "gvisor.dev/gvisor/"},
		{"client-go", "pinfold-kube", "k8s.io/client-go/"},
		{"go-containerregistry", "pinfold-pack", "github.com/google/go-containerregistry/"},
		{"the image writer", "pinfold-pack", "github.com/pinfold/pinfold/internal/packer"},
		{"net/http", "pinfold-api", "net/http"},
		{"the API's WebSocket", "pinfold-api", "github.com/coder/websocket"},
		{"the MCP SDK", "pinfold-api", "github.com/modelcontextprotocol/go-sdk/"},
		{"the kube helper's WebSocket", "pinfold-kube", "github.com/gorilla/websocket"},
	} {
		t.Run(c.name, func(t *testing.T) {
			match := func(p string) bool {
				if strings.HasSuffix(c.prefix, "/") {
					return strings.HasPrefix(p, c.prefix)
				}
				return p == c.prefix
			}
			if i := slices.IndexFunc(pinfold, match); i >= 0 {
				t.Errorf("pinfold links %s (%s belongs in %s)", pinfold[i], c.name, c.helper)
			}
			if !slices.ContainsFunc(deps(t, "github.com/pinfold/pinfold/cmd/"+c.helper), match) {
				t.Errorf("%s does not link %s: the check above would pass for the wrong reason", c.helper, c.prefix)
			}
		})
	}
}

// TestStartupExclusions: packages no helper needs either, kept out of
// pinfold because their package init runs on every start, a first `pinfold
// run` included (docs/benchmarks.md, "A first run"): mpb's progress bars
// (its ANSI stripper compiles a regexp at init, go-runewidth reads the
// locale) gave way to the reporter's own live lines, and doctor reads
// runsc's version without debug/buildinfo (debug/elf, dwarf, macho, pe).
func TestStartupExclusions(t *testing.T) {
	pinfold := deps(t, "github.com/pinfold/pinfold/cmd/pinfold")
	for _, prefix := range []string{
		"github.com/vbauerster/mpb/",
		"github.com/acarl005/stripansi",
		"github.com/mattn/go-runewidth",
		"debug/",
	} {
		if i := slices.IndexFunc(pinfold, func(p string) bool { return strings.HasPrefix(p, prefix) }); i >= 0 {
			t.Errorf("pinfold links %s, whose init every start would pay", pinfold[i])
		}
	}
}
