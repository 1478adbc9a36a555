package cli_test

import (
	"debug/buildinfo"
	"os/exec"
	"strings"
	"testing"
)

// TestPinfoldDoesNotLinkThePackHelper: go-containerregistry and the image
// writer live in pinfold-pack; a plain pinfold run must not pay for their
// package inits (see internal/pack).
func TestPinfoldDoesNotLinkThePackHelper(t *testing.T) {
	info, err := buildinfo.ReadFile(pinfold)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range info.Deps {
		if strings.HasPrefix(m.Path, "github.com/google/go-containerregistry") || strings.HasPrefix(m.Path, "github.com/klauspost/compress") {
			t.Errorf("pinfold links %s", m.Path)
		}
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/pinfold/pinfold/cmd/pinfold").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "github.com/pinfold/pinfold/internal/packer" {
			t.Errorf("pinfold links %s", p)
		}
	}
	if !strings.Contains(string(out), "github.com/pinfold/pinfold/internal/pack\n") {
		t.Error("go list -deps does not list internal/pack: the check above would pass for the wrong reason")
	}
}
