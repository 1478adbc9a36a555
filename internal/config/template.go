package config

import "embed"

// The starter files `pinfold init` writes; the linker lays them out, so
// they cost nothing until used.
//
//go:embed templates/*.yaml
var templateFS embed.FS

// templateNames are the templates, in the order detection tries them.
var templateNames = [...]string{"npm", "uv", "poetry", "pip", "cargo", "go", "generic"}

// Templates returns the names of the starter files Template knows.
func Templates() []string {
	return append([]string(nil), templateNames[:]...)
}

// Template returns the commented starter pinfold.yaml for an ecosystem
// (npm, pip, uv, poetry, cargo, go or generic).
func Template(name string) ([]byte, bool) {
	for _, n := range templateNames {
		if n == name {
			b, err := templateFS.ReadFile("templates/" + name + ".yaml")
			return b, err == nil
		}
	}
	return nil, false
}

// DetectTemplate picks the template for a project from the files in its
// directory, as exists reports them, and returns the file that decided
// ("" for generic).
func DetectTemplate(exists func(name string) bool) (template, file string) {
	for _, c := range [...]struct{ file, template string }{
		{"package.json", "npm"},
		{"uv.lock", "uv"},
		{"poetry.lock", "poetry"},
		{"requirements.txt", "pip"},
		{"pyproject.toml", "pip"},
		{"Cargo.toml", "cargo"},
		{"go.mod", "go"},
	} {
		if exists(c.file) {
			return c.template, c.file
		}
	}
	return "generic", ""
}
