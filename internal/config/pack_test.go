package config

import (
	"slices"
	"strings"
	"testing"
)

func TestDecodePack(t *testing.T) {
	f, err := Parse("pinfold.yaml", []byte("version: 1\npack:\n  entrypoint: [python3]\n  cmd: [main.py, --serve]\n  tag: app:1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p := f.Pack; p == nil || !slices.Equal(p.Entrypoint, []string{"python3"}) || !slices.Equal(p.Cmd, []string{"main.py", "--serve"}) || p.Tag != "app:1" {
		t.Fatalf("pack: %+v", f.Pack)
	}
	for in, want := range map[string]string{
		"version: 1\npack:\n  command: [x]\n":                    "command",
		"version: 1\npack: [x]\n":                                "a mapping",
		"version: 1\nprofiles:\n  p:\n    pack:\n      tag: x\n": "pack",
	} {
		if _, err := Parse("pinfold.yaml", []byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error naming %q", in, err, want)
		}
	}
}
