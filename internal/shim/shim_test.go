package shim

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeBin writes an executable shell script.
func fakeBin(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
}

// runShim runs a shim with PATH set to path and returns its output.
func runShim(t *testing.T, shim, path string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, shim, args...)
	cmd.Env = []string{"PATH=" + path}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("running %s: %v (stderr %q)", shim, err, errb.String())
	}
	return out.String()
}

// setup makes a shim directory (with an awkward name) holding a pftool
// shim that runs the fake pinfold with body, and a directory with the
// real pftool.
func setup(t *testing.T, pinfoldBody string) (dir, real string) {
	t.Helper()
	tmp := t.TempDir()
	dir = filepath.Join(tmp, "it's shims")
	real = filepath.Join(tmp, "real bin")
	pinfold := filepath.Join(tmp, "pin fold", "pinfold")
	fakeBin(t, pinfold, pinfoldBody)
	fakeBin(t, filepath.Join(real, "pftool"), `echo "real pftool:$*"`+"\n")
	shims, err := Install(dir, pinfold, []string{"pftool"})
	if err != nil || len(shims) != 1 || shims[0].Tool != "pftool" || shims[0].Pinfold != pinfold {
		t.Fatalf("Install: %+v %v", shims, err)
	}
	return dir, real
}

func TestShimRunsPinfold(t *testing.T) {
	dir, real := setup(t, `for a in "$@"; do echo "arg:$a"; done; echo "PATH=$PATH"`+"\n")
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, path, want string }{
		{"first", dir + ":" + real + ":/usr/bin:/bin", real + ":/usr/bin:/bin"},
		{"twice, trailing slash, symlink", dir + "/:" + real + ":" + link + ":/usr/bin:" + dir + ":/bin", real + ":/usr/bin:/bin"},
		{"relative entries kept", dir + ":bin::/bin", "bin::/bin"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := runShim(t, filepath.Join(dir, "pftool"), c.path, "a", "b c", "", "$HOME'")
			want := "arg:run\narg:--\narg:pftool\narg:a\narg:b c\narg:\narg:$HOME'\nPATH=" + c.want + "\n"
			if out != want {
				t.Errorf("got\n%s\nwant\n%s", out, want)
			}
		})
	}
}

// TestShimNoRecursion: a pinfold that runs the tool by name on the host
// (as backend: host does) reaches the real tool, not the shim again.
func TestShimNoRecursion(t *testing.T) {
	dir, real := setup(t, `shift 2; exec "$@"`+"\n")
	out := runShim(t, filepath.Join(dir, "pftool"), dir+":"+real+":/usr/bin:/bin", "x", "y")
	if out != "real pftool:x y\n" {
		t.Errorf("got %q", out)
	}
}

func TestListAndUninstall(t *testing.T) {
	dir, _ := setup(t, "exit 0\n")
	if _, err := Install(dir, "/usr/local/bin/pinfold", []string{"npm", "go"}); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(dir, "foreign")
	fakeBin(t, foreign, "echo mine\n")
	os.WriteFile(filepath.Join(dir, "README.md"), []byte("notes"), 0o644)
	os.Symlink(filepath.Join(dir, "npm"), filepath.Join(dir, "npm2"))

	shims, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range shims {
		names = append(names, s.Tool+"="+s.Pinfold)
	}
	if got := strings.Join(names, " "); got != "go=/usr/local/bin/pinfold npm=/usr/local/bin/pinfold pftool="+filepath.Join(filepath.Dir(dir), "pin fold", "pinfold") {
		t.Errorf("List: %s", got)
	}

	// Foreign files are neither replaced nor removed.
	if _, err := Install(dir, "/usr/local/bin/pinfold", []string{"foreign"}); !errors.Is(err, ErrNotShim) {
		t.Errorf("Install over a foreign file: %v", err)
	}
	if _, err := Uninstall(dir, []string{"foreign"}); !errors.Is(err, ErrNotShim) {
		t.Errorf("Uninstall of a foreign file: %v", err)
	}
	if _, err := Uninstall(dir, []string{"npm2"}); !errors.Is(err, ErrNotShim) {
		t.Errorf("Uninstall of a symlink: %v", err)
	}
	if _, err := Uninstall(dir, []string{"cargo"}); !errors.Is(err, ErrNoShim) {
		t.Errorf("Uninstall of a missing shim: %v", err)
	}
	if b, _ := os.ReadFile(foreign); string(b) != "#!/bin/sh\necho mine\n" {
		t.Errorf("foreign file changed: %q", b)
	}

	removed, err := Uninstall(dir, []string{"npm"})
	if err != nil || len(removed) != 1 || removed[0] != filepath.Join(dir, "npm") {
		t.Errorf("Uninstall npm: %v %v", removed, err)
	}
	removed, err = Uninstall(dir, nil)
	if err != nil || len(removed) != 2 {
		t.Errorf("Uninstall all: %v %v", removed, err)
	}
	left, _ := os.ReadDir(dir)
	var rest []string
	for _, e := range left {
		rest = append(rest, e.Name())
	}
	if strings.Join(rest, " ") != "README.md foreign npm2" {
		t.Errorf("left behind: %v", rest)
	}
}

func TestInstallReplacesOwnShims(t *testing.T) {
	dir := t.TempDir()
	if _, err := Install(dir, "/old/pinfold", []string{"npm"}); err != nil {
		t.Fatal(err)
	}
	if _, err := Install(dir, "/new/pinfold", []string{"npm"}); err != nil {
		t.Fatal(err)
	}
	shims, _ := List(dir)
	if len(shims) != 1 || shims[0].Pinfold != "/new/pinfold" {
		t.Errorf("%+v", shims)
	}
	st, _ := os.Stat(filepath.Join(dir, "npm"))
	if st.Mode().Perm() != 0o755 {
		t.Errorf("mode %v", st.Mode())
	}
	if _, err := Install(dir, "pinfold", []string{"npm"}); err == nil {
		t.Error("relative pinfold path accepted")
	}
	if _, err := Install(dir, "/p", []string{"../x"}); err == nil {
		t.Error("bad tool name accepted")
	}
}

func TestValidTool(t *testing.T) {
	for name, ok := range map[string]bool{
		"npm": true, "pip3": true, "g++": true, "python3.12": true, "x_y-z": true,
		"": false, ".hidden": false, "-rf": false, "a/b": false, "..": false, "a b": false, "a'b": false,
	} {
		if err := ValidTool(name); (err == nil) != ok {
			t.Errorf("%q: %v", name, err)
		}
	}
}

func TestDir(t *testing.T) {
	t.Setenv("PINFOLD_SHIM_DIR", "/opt/shims")
	if d, err := Dir(); err != nil || d != "/opt/shims" {
		t.Errorf("%q %v", d, err)
	}
	t.Setenv("PINFOLD_SHIM_DIR", "")
	d, err := Dir()
	if os.Geteuid() == 0 && (err != nil || d != "/usr/local/lib/pinfold/shims") {
		t.Errorf("root: %q %v", d, err)
	}
}

func TestOnPath(t *testing.T) {
	for _, c := range []struct {
		path      string
		on, first bool
	}{
		{"/s:/usr/bin", true, true},
		{"/usr/bin:/s/", true, false},
		{"/usr/bin", false, false},
		{"", false, false},
	} {
		if on, first := OnPath(c.path, "/s"); on != c.on || first != c.first {
			t.Errorf("%q: %v %v", c.path, on, first)
		}
	}
}
