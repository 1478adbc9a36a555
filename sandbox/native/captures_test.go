package native_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/sandbox"
)

// Forty captures besides the workspace: the staging tmpfs holds every
// overlay's two layers (its inodes are counted from the overlays).
func TestManyCapturesStaged(t *testing.T) {
	spec := baseSpec(t)
	upper, work := captureDirs(t)
	spec.Access = sandbox.AccessChangeset
	spec.Changeset = &sandbox.Capture{Upper: upper, Work: work}
	var script strings.Builder
	for i := 0; i < 40; i++ {
		dir := t.TempDir()
		up, wk := captureDirs(t)
		spec.Captures = append(spec.Captures, sandbox.Capture{Path: dir, Upper: up, Work: wk})
		fmt.Fprintf(&script, "echo %d > %s/f && ", i, dir)
	}
	script.WriteString("echo ok")
	res, out, errs := run(t, spec, &sandbox.Cmd{Args: []string{"sh", "-c", script.String()}})
	if res.ExitCode != 0 || out != "ok\n" {
		t.Fatalf("%d %q %q", res.ExitCode, out, errs)
	}
	for i, c := range spec.Captures {
		if b, err := os.ReadFile(filepath.Join(c.Upper, "f")); err != nil || string(b) != fmt.Sprintf("%d\n", i) {
			t.Errorf("capture %d: %q %v", i, b, err)
		}
		if _, err := os.Stat(filepath.Join(c.Path, "f")); err == nil {
			t.Errorf("capture %d written on the host", i)
		}
	}
}
