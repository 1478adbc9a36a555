package cli_test

import (
	"debug/buildinfo"
	"strings"
	"testing"
)

// TestPinfoldDoesNotLinkThePackHelper: go-containerregistry and the image
// writer live in pinfold-pack; a plain pinfold run must not pay for their
// package inits (see internal/pack). This checks the binary the tests
// built; cmd/pinfold's TestHelperExclusions checks the import graph for
// every helper.
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
}
