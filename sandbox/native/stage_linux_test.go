package native

import (
	"strings"
	"testing"

	initp "github.com/pinfold/pinfold/internal/backend/native"
)

// An overlay's layers are staged under the old root, on a tmpfs mounted
// before anything is made there, so that the old root's one detach takes
// them: no unmount of its own (each waits for an RCU grace period), and no
// directory made on the host's file system.
func TestOverlayLayersStagedUnderTheOldRoot(t *testing.T) {
	ws, cs := t.TempDir(), t.TempDir()
	p := rootPlan{baseRoot: "/", hostBase: true, tmpSize: 1 << 20, idmap: true,
		overlays: []overlay{{lower: ws, upper: cs + "/upper", work: cs + "/work"}}}
	ops, _ := buildRoot(&p)
	stage := p.stageTmpfs()
	if !strings.HasPrefix(stage, "/.old/") {
		t.Fatalf("stage %s is not under the old root", stage)
	}
	mounted := false
	overlays := 0
	for _, op := range ops {
		switch {
		case op.Kind == initp.OpUmount:
			t.Errorf("an unmount in the root's ops: %+v", op)
		case op.Kind == initp.OpMount && op.B == stage:
			if op.C != "tmpfs" {
				t.Errorf("the stage is a %s mount", op.C)
			}
			mounted = true
		case strings.HasPrefix(op.B, "/.old/") && !mounted:
			t.Errorf("%+v before the stage's tmpfs", op)
		case op.Kind == initp.OpMount && op.C == "overlay":
			overlays++
			if !strings.Contains(op.D, "lowerdir="+stage+"/l0,") || !strings.Contains(op.D, "upperdir="+stage+"/u0/upper,") {
				t.Errorf("overlay options %q do not name the staged layers", op.D)
			}
		}
	}
	if !mounted || overlays != 1 {
		t.Fatalf("stage mounted %v, %d overlays: %+v", mounted, overlays, ops)
	}
}
