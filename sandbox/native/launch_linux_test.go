package native

import (
	"os"
	"path/filepath"
	"testing"

	initp "github.com/pinfold/pinfold/internal/backend/native"
	"github.com/pinfold/pinfold/sandbox"
)

// TestCallerDep checks that a dependency the caller read (sandbox.LaunchDep)
// becomes the record's dependency the runtime would have read itself, for
// files, links, dangling links, directories and missing paths.
func TestCallerDep(t *testing.T) {
	dir := t.TempDir()
	file, link, dangling, sub := filepath.Join(dir, "f"), filepath.Join(dir, "l"), filepath.Join(dir, "d"), filepath.Join(dir, "s")
	os.WriteFile(file, []byte("x"), 0o640)
	os.Symlink(file, link)
	os.Symlink(filepath.Join(dir, "none"), dangling)
	os.Mkdir(sub, 0o750)
	kinds := map[sandbox.LaunchCheck]initp.DepKind{sandbox.LaunchStat: initp.DepStat, sandbox.LaunchLstat: initp.DepLstat, sandbox.LaunchAttr: initp.DepAttr}
	for check, kind := range kinds {
		for _, path := range []string{file, link, dangling, sub, filepath.Join(dir, "none"), filepath.Join(file, "below")} {
			d, err := sandbox.ReadLaunchDep(check, path)
			if err != nil {
				t.Fatalf("%d %s: %v", check, path, err)
			}
			got, ok := callerDep(d)
			want, err := initp.StatDep(kind, path)
			if !ok || err != nil || !got.Same(want) {
				t.Errorf("%d %s: got %+v %v, want %+v %v", check, path, got, ok, want, err)
			}
		}
	}
	if _, ok := callerDep(sandbox.LaunchDep{Path: file}); ok {
		t.Error("a dependency without a check was taken")
	}
}

// TestSpecDeps checks which host paths keep a sandbox recordable.
func TestSpecDeps(t *testing.T) {
	ws := t.TempDir()
	link := filepath.Join(t.TempDir(), "ws")
	os.Symlink(ws, link)
	for _, c := range []struct {
		name string
		spec sandbox.Spec
		want bool
	}{
		{"workspace", sandbox.Spec{Workspace: ws, Access: sandbox.AccessReadOnly}, true},
		{"mount", sandbox.Spec{Workspace: ws, Mounts: []sandbox.Mount{{Source: ws, Target: "/data"}}}, true},
		{"workspace through a link", sandbox.Spec{Workspace: link, Access: sandbox.AccessReadOnly}, false},
		{"mount over a system directory", sandbox.Spec{Workspace: ws, Mounts: []sandbox.Mount{{Source: ws, Target: "/usr/x"}}}, false},
		{"relative mount source", sandbox.Spec{Workspace: ws, Mounts: []sandbox.Mount{{Source: "ws", Target: "/data"}}}, false},
	} {
		l := &launchDeps{ok: true}
		if got := l.specDeps(&c.spec) && l.ok; got != c.want {
			t.Errorf("%s: got %v", c.name, got)
		}
	}
}
