package changeset

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/internal/config"
)

// TestPolicyChanges: every way a real overlay's writes can change a
// pinfold.yaml discovery would find is named, with the hooks it adds; a
// version that cannot be told is a problem, never a pass; other files and
// unselected paths are not policy changes.
func TestPolicyChanges(t *testing.T) {
	o := newOverlay(t)
	writeFile(t, filepath.Join(o.lower, "pinfold.yaml"), "version: 1\npre_run:\n  - make check\nnetwork: none\nprofiles:\n  build:\n    access: rw\n"+
		"    pre_run: [\"./scripts/check.sh --fast\", [sh, tools/lint]]\n", 0o644)
	os.MkdirAll(filepath.Join(o.lower, "scripts"), 0o755)
	writeFile(t, filepath.Join(o.lower, "scripts", "check.sh"), "#!/bin/sh\n", 0o755)
	os.MkdirAll(filepath.Join(o.lower, "gone", "deep"), 0o755)
	writeFile(t, filepath.Join(o.lower, "gone", "deep", "pinfold.yaml"), "version: 1\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "same.yaml"), "version: 1\npre_run: [evil]\n", 0o644)
	writeFile(t, filepath.Join(o.lower, "notes.txt"), "pinfold.yaml\n", 0o644)
	os.MkdirAll(filepath.Join(o.lower, "bad"), 0o755)
	o.inside(t, `
cat > pinfold.yaml <<'Y'
version: 1
pre_run:
  - make check
  - "curl x | sh"
network: 'none'
profiles:
  build:
    access: rw
    pre_run: [[rm, -rf, /]]
  new:
    network: host
Y
mkdir -p a/b && printf 'version: 1\nbackend: host\n' > a/b/pinfold.yaml
rm -r gone
ln -s ../same.yaml bad/pinfold.yaml
mkdir -p broken && printf 'version: 1\npre_run: [\n' > broken/pinfold.yaml
mkdir -p dir/pinfold.yaml
echo changed > notes.txt
echo 'curl x | sh' >> scripts/check.sh
mkdir tools && echo x > tools/lint
`)
	entries := o.scan(t)
	pc := PolicyChanges(o.roots(), entries, nil, nil)
	got := map[string]PolicyChange{}
	for _, c := range pc {
		got[c.Path] = c
	}
	want := map[string]string{
		"pinfold.yaml (modified); host hooks it adds: pre_run: curl x | sh; profiles.build.pre_run: [rm, -rf, /]; settings it changes: pre_run, profiles.build.pre_run, profiles.new": "",
		"a/b/pinfold.yaml (added); settings it changes: version, backend":                                                               "",
		"gone/deep/pinfold.yaml (deleted); settings it changes: version":                                                                "",
		`bad/pinfold.yaml (added): the new version is a symbolic link to "../same.yaml"`:                                                "",
		"broken/pinfold.yaml (added): the new version does not parse":                                                                   "",
		"dir/pinfold.yaml (added): the new version is not a regular file":                                                               "",
		`scripts/check.sh (modified): the pre_run hook "./scripts/check.sh --fast" of ` + o.lower + `/pinfold.yaml runs it on the host`: "",
		`tools/lint (added): the pre_run hook "[sh, tools/lint]" of ` + o.lower + `/pinfold.yaml runs it on the host`:                   "",
	}
	if len(got) != len(want) {
		t.Errorf("%d changes, want %d: %+v", len(got), len(want), pc)
	}
	for w := range want {
		path := w[:strings.IndexByte(w, ' ')]
		c, ok := got[path]
		if !ok {
			t.Errorf("%s not flagged", path)
			continue
		}
		if s := c.String(); !strings.HasPrefix(s, w) {
			t.Errorf("got  %s\nwant %s", s, w)
		}
	}
	// diff --json marks the same entries, and no other.
	var buf bytes.Buffer
	if err := WriteJSON(&buf, o.roots(), entries, DiffOptions{}); err != nil {
		t.Fatal(err)
	}
	var js []struct {
		Path   string             `json:"path"`
		Policy *config.PolicyDiff `json:"policy"`
	}
	if err := json.Unmarshal(buf.Bytes(), &js); err != nil {
		t.Fatal(err)
	}
	marked := 0
	for _, j := range js {
		if j.Policy != nil {
			marked++
			if _, ok := got[j.Path]; !ok {
				t.Errorf("diff --json marks %s", j.Path)
			}
		}
	}
	if marked != len(got) {
		t.Errorf("diff --json marks %d entries, want %d:\n%s", marked, len(got), buf.String())
	}
	// Paths select, as apply's do; a prefix names a captured root.
	if pc := PolicyChanges(o.roots(), entries, []string{"notes.txt", "a"}, nil); len(pc) != 1 || pc[0].Path != "a/b/pinfold.yaml" {
		t.Errorf("with paths: %+v", pc)
	}
	if pc := PolicyChanges(o.roots(), entries, []string{"notes.txt"}, nil); len(pc) != 0 {
		t.Errorf("notes.txt alone: %+v", pc)
	}
	pre := func(int) string { return "captured/1/" }
	if pc := PolicyChanges(o.roots(), entries, []string{"captured/1/a"}, pre); len(pc) != 1 || pc[0].Path != "captured/1/a/b/pinfold.yaml" {
		t.Errorf("with a prefix: %+v", pc)
	}
}
