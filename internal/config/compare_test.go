package config

import (
	"slices"
	"testing"
)

func TestComparePolicy(t *testing.T) {
	for _, c := range []struct {
		name, old, new string
		oldNil         bool
		keys, hooks    []string
		problem        bool
	}{
		{name: "same, rewritten", old: "version: 1\nnetwork: none\n", new: "# a comment\nversion: 1\nnetwork: 'none'\n"},
		{name: "quoted true is another value", old: "version: 1\nhost_loopback: true\n", new: "version: 1\nhost_loopback: \"true\"\n",
			keys: []string{"host_loopback"}, problem: true},
		{name: "a hook moved to a profile", old: "version: 1\npre_run: [make]\nprofiles:\n  p:\n    access: ro\n",
			new:  "version: 1\nprofiles:\n  p:\n    access: ro\n    pre_run: [make]\n",
			keys: []string{"profiles.p.pre_run", "pre_run"}, hooks: []string{"profiles.p.pre_run: make"}},
		{name: "a new file", oldNil: true, new: "version: 1\npre_run:\n  - [sh, -c, 'echo $HOME']\n",
			keys: []string{"version", "pre_run"}, hooks: []string{"pre_run: [sh, -c, 'echo $HOME']"}},
		{name: "not YAML", old: "version: 1\n", new: "version: 1\n\tpre_run: x\n", problem: true},
	} {
		var old []byte
		if !c.oldNil {
			old = []byte(c.old)
		}
		d := ComparePolicy("pinfold.yaml", old, []byte(c.new))
		if !slices.Equal(d.Keys, c.keys) || !slices.Equal(d.Hooks, c.hooks) || (d.Problem != "") != c.problem {
			t.Errorf("%s: got %+v", c.name, d)
		}
	}
	if d := ComparePolicy("pinfold.yaml", []byte("version: 1\npre_run: [x]\n"), nil); !slices.Equal(d.Keys, []string{"version", "pre_run"}) || d.Hooks != nil {
		t.Errorf("deleted: %+v", d)
	}
}
