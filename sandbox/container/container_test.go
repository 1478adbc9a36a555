package container

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestExecSniffer(t *testing.T) {
	for _, c := range []struct {
		name   string
		writes []string
		pass   string
		err    error
		what   string
	}{
		{"not found", []string{"[FATAL tini (7)] exec nosuch failed: No such file or directory\n"}, "", fs.ErrNotExist, "nosuch"},
		{"split", []string{"[FATAL ti", "ni (7)] exec /etc failed: Perm", "ission denied\nafter\n"}, "after\n", fs.ErrPermission, "/etc"},
		{"the command's own stderr", []string{"[FATAL something else]\n", "more\n"}, "[FATAL something else]\nmore\n", nil, ""},
		{"a prefix that diverges", []string{"[FAT", "E\n"}, "[FATE\n", nil, ""},
		{"plain", []string{"hello ", "world\n"}, "hello world\n", nil, ""},
	} {
		var out bytes.Buffer
		s := &execSniffer{w: &out}
		for _, w := range c.writes {
			s.Write([]byte(w))
		}
		s.flush()
		if out.String() != c.pass || !errors.Is(s.execErr, c.err) && c.err != nil || c.err == nil && s.execErr != nil || s.execName != c.what {
			t.Errorf("%s: passed %q, err %v (%q)", c.name, out.String(), s.execErr, s.execName)
		}
	}
	s := &execSniffer{}
	s.Write([]byte("Error: image not known\n"))
	if !s.engineFailed() {
		t.Errorf("an engine error line was not recognised: %q", s.first)
	}
}

func TestEnvFor(t *testing.T) {
	store := t.TempDir()
	dir, err := workDir(store)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	clientEnv, args, err := envFor([]string{"A=1", "B=two words", "C=line1\nline2", "=x", "bad"}, dir)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "env")
	b, err := os.ReadFile(file)
	if err != nil || string(b) != "A=1\nB=two words\n" {
		t.Errorf("env file: %q %v", b, err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("env file mode: %v %v", fi, err)
	}
	if !strings.HasPrefix(file, filepath.Join(store, "tmp")+"/") {
		t.Errorf("env file %s is not in the store's tmp/", file)
	}
	if strings.Join(args, " ") != "-e C --env-file "+file {
		t.Errorf("args: %q", args)
	}
	found := false
	for _, kv := range clientEnv {
		found = found || kv == "C=line1\nline2"
	}
	if !found {
		t.Error("the value with a newline is not in the client's environment")
	}
	for _, a := range args {
		if strings.Contains(a, "line1") || strings.Contains(a, "two words") {
			t.Errorf("a value on the command line: %q", args)
		}
	}
}

func TestMountable(t *testing.T) {
	for _, p := range []string{"/a:b", "/a,b", `/a"b`, `/a\b`, "/a\nb"} {
		if mountable(p) == nil {
			t.Errorf("%q accepted", p)
		}
	}
	if err := mountable("/home/user/project-1.2_x"); err != nil {
		t.Error(err)
	}
}
