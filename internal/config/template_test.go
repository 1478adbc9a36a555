package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTemplatesLoad(t *testing.T) {
	for _, name := range Templates() {
		t.Run(name, func(t *testing.T) {
			data, ok := Template(name)
			if !ok {
				t.Fatalf("no template %q", name)
			}
			path := filepath.Join(t.TempDir(), FileName)
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := Load(path)
			if err != nil {
				t.Fatalf("template %s:\n%v", name, err)
			}
			var install, test *Profile
			for i := range f.Profiles {
				switch f.Profiles[i].Name {
				case "install":
					install = &f.Profiles[i]
				case "test":
					test = &f.Profiles[i]
				}
			}
			if install == nil || test == nil {
				t.Fatalf("profiles %+v; want install and test", f.Profiles)
			}
			if *install.Settings.Role != "install" || *install.Settings.Network != "outbound" || *test.Settings.Network != "none" {
				t.Errorf("install %+v, test %+v", install.Settings, test.Settings)
			}
			if name != "generic" && (!*install.Settings.RequireLockfile || len(install.Settings.LockfileFiles) == 0 || len(f.Settings.Caches) == 0) {
				t.Errorf("%s: install needs lockfiles and a cache: %+v", name, install.Settings)
			}
			routes := map[string]bool{}
			for _, r := range f.Dispatch {
				routes[r.Profile] = true
			}
			if (name != "generic" && !routes["install"]) || !routes["test"] {
				t.Errorf("dispatch %+v does not route to install and test", f.Dispatch)
			}
		})
	}
	if _, ok := Template("cobol"); ok {
		t.Error("Template(cobol) found something")
	}
}

func TestDetectTemplate(t *testing.T) {
	for _, c := range []struct {
		files      []string
		want, file string
	}{
		{nil, "generic", ""},
		{[]string{"package.json", "go.mod"}, "npm", "package.json"},
		{[]string{"pyproject.toml", "uv.lock"}, "uv", "uv.lock"},
		{[]string{"pyproject.toml", "poetry.lock"}, "poetry", "poetry.lock"},
		{[]string{"pyproject.toml"}, "pip", "pyproject.toml"},
		{[]string{"requirements.txt"}, "pip", "requirements.txt"},
		{[]string{"Cargo.toml"}, "cargo", "Cargo.toml"},
		{[]string{"go.mod", "go.sum"}, "go", "go.mod"},
		{[]string{"Makefile"}, "generic", ""},
	} {
		has := map[string]bool{}
		for _, f := range c.files {
			has[f] = true
		}
		got, file := DetectTemplate(func(n string) bool { return has[n] })
		if got != c.want || file != c.file {
			t.Errorf("DetectTemplate(%v) = %s, %s; want %s, %s", c.files, got, file, c.want, c.file)
		}
	}
}

// TestDocsShowTemplates keeps the examples of docs/config.md the same as
// what pinfold init writes.
func TestDocsShowTemplates(t *testing.T) {
	doc, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range Templates() {
		data, _ := Template(name)
		block := "`pinfold init --template " + name + "`:\n\n```yaml\n" + string(data) + "```\n"
		if !strings.Contains(string(doc), block) {
			t.Errorf("docs/config.md does not show the %s template as it is; copy internal/config/templates/%s.yaml there", name, name)
		}
	}
}
