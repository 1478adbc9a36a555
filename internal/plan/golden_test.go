package plan

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/internal/config"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// TestGolden resolves the commands of representative projects against the
// starter configs `pinfold init` writes and compares the printed plans
// with testdata/golden/*.txt and *.json.
func TestGolden(t *testing.T) {
	for _, c := range []struct {
		template string
		args     []string
		files    []string // present in the workspace
	}{
		{"npm", []string{"npm", "install"}, []string{"package-lock.json"}},
		{"npm", []string{"npm", "test"}, nil},
		{"pip", []string{"pip", "install", "-r", "requirements.txt"}, []string{"requirements.txt"}},
		{"pip", []string{"pytest", "-q"}, nil},
		{"uv", []string{"uv", "sync"}, []string{"uv.lock"}},
		{"uv", []string{"uv", "run", "pytest"}, nil},
		{"poetry", []string{"poetry", "install"}, []string{"poetry.lock"}},
		{"poetry", []string{"poetry", "run", "pytest"}, nil},
		{"cargo", []string{"cargo", "fetch"}, []string{"Cargo.lock"}},
		{"cargo", []string{"cargo", "test"}, nil},
		{"go", []string{"go", "mod", "download"}, []string{"go.sum"}},
		{"go", []string{"go", "test", "./..."}, nil},
		{"generic", []string{"make", "check"}, nil},
	} {
		name := c.template + "_" + strings.Join(c.args, "-")
		name = strings.NewReplacer("/", "", ".", "", "--", "-").Replace(name)
		t.Run(name, func(t *testing.T) {
			data, ok := config.Template(c.template)
			if !ok {
				t.Fatalf("no template %s", c.template)
			}
			f, err := config.Parse("/work/app/pinfold.yaml", data)
			if err != nil {
				t.Fatal(err)
			}
			files := map[string]bool{}
			for _, fn := range c.files {
				files["/work/app/"+fn] = true
			}
			host := []string{"HOME=/home/dev", "PATH=/usr/bin:/bin", "LANG=C.UTF-8", "NPM_TOKEN=npm_xyz", "LD_PRELOAD=/evil.so"}
			p, err := Resolve(&Request{Args: c.args, Config: f, Cwd: "/work/app", Home: "/home/dev",
				Store: "/var/lib/pinfold", Environ: host, Exists: func(p string) bool { return files[p] },
				Getenv: func(k string) (string, bool) {
					for _, kv := range host {
						if n, v, _ := strings.Cut(kv, "="); n == k {
							return v, true
						}
					}
					return "", false
				}})
			if err != nil {
				t.Fatal(err)
			}
			var text, js bytes.Buffer
			p.Text(&text)
			if err := p.JSON(&js); err != nil {
				t.Fatal(err)
			}
			golden(t, filepath.Join("testdata", "golden", name+".txt"), text.Bytes())
			golden(t, filepath.Join("testdata", "golden", name+".json"), js.Bytes())
		})
	}
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/plan -run TestGolden -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
