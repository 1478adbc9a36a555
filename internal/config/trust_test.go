package config

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDiscoverTrust walks real directories: every way a file or a
// directory on the walk may belong to someone else, and the trust list.
func TestDiscoverTrust(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files to other users")
	}
	type tree struct {
		fileUID, dirUID, midUID int
		mode                    os.FileMode
		link                    bool
	}
	for _, c := range []struct {
		name    string
		tr      tree
		trusted string
		used    bool
		why     string
	}{
		{"root's", tree{0, 0, 0, 0o644, false}, "", true, ""},
		{"read-only", tree{0, 0, 0, 0o400, false}, "", true, ""},
		{"another user's file", tree{65534, 0, 0, 0o644, false}, "", false, "it belongs to uid 65534"},
		{"group-writable", tree{0, 0, 0, 0o664, false}, "", false, "writable by its group or by others (mode 0664)"},
		{"world-writable", tree{0, 0, 0, 0o646, false}, "", false, "mode 0646"},
		{"in another user's directory", tree{0, 65534, 0, 0o644, false}, "", false, "its directory belongs to uid 65534"},
		{"above another user's directory", tree{0, 0, 65534, 0o644, false}, "", false, "the directory MID on the way to it belongs to uid 65534"},
		{"a symbolic link", tree{0, 0, 0, 0o644, true}, "", false, "symbolic link"},
		{"trusted by directory", tree{65534, 65534, 0, 0o666, false}, "TOP", true, ""},
		{"trusted below a directory", tree{65534, 0, 65534, 0o644, false}, "ROOT", true, ""},
		{"trusted: all", tree{65534, 0, 0, 0o644, true}, "*", true, ""},
		{"relative entries trust nothing", tree{65534, 0, 0, 0o644, false}, "top:.:", false, "belongs to uid 65534"},
		{"another directory trusted", tree{65534, 0, 0, 0o644, false}, "ROOT/top2", false, "belongs to uid 65534"},
		{"root through sudo: the user's", tree{65534, 65534, 65534, 0o644, false}, "SUDO=65534", true, ""},
		{"root through sudo: another user's", tree{65534, 0, 0, 0o644, false}, "SUDO=1000", false, "belongs to uid 65534"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			top := filepath.Join(root, "top")
			start := filepath.Join(top, "mid", "start", "deeper")
			os.MkdirAll(start, 0o755)
			f := filepath.Join(top, FileName)
			target := f
			if c.tr.link {
				target = filepath.Join(root, "real.yaml")
				os.Symlink(target, f)
			}
			os.WriteFile(target, []byte("version: 1\n"), 0o600)
			os.Chmod(target, c.tr.mode)
			os.Chown(target, c.tr.fileUID, 0)
			os.Chown(top, c.tr.dirUID, 0)
			os.Chown(filepath.Join(top, "mid", "start"), c.tr.midUID, 0)
			trusted := strings.NewReplacer("ROOT", root, "TOP", top).Replace(c.trusted)
			t.Setenv("SUDO_UID", "")
			if sudo, ok := strings.CutPrefix(trusted, "SUDO="); ok {
				t.Setenv("SUDO_UID", sudo)
				trusted = ""
			}
			t.Setenv(TrustEnv, trusted)
			d, err := Discover(start)
			if err != nil {
				t.Fatal(err)
			}
			if c.used {
				if d.Path != f || d.Ignored != nil {
					t.Errorf("not used: %+v %+v", d, d.Ignored)
				}
				if _, err := LoadDiscovered(d.Path); err != nil {
					t.Error(err)
				}
				return
			}
			why := strings.ReplaceAll(c.why, "MID", filepath.Join(top, "mid", "start"))
			if d.Path != "" || d.Ignored == nil || d.Ignored.Path != f || !strings.Contains(d.Ignored.Why, why) {
				t.Fatalf("got %+v %+v, want %s passed over: %s", d, d.Ignored, f, why)
			}
			if msg := d.Ignored.Message(); !strings.Contains(msg, TrustEnv+"="+top) || !strings.Contains(msg, "--config "+f) {
				t.Errorf("message %q", msg)
			}
			if p, _ := Find(start); p != "" {
				t.Errorf("Find used %s", p)
			}
		})
	}
}

// TestLoadDiscoveredRechecks: a file replaced by another user's between
// the walk and the read is refused.
func TestLoadDiscoveredRechecks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files to other users")
	}
	t.Setenv(TrustEnv, "")
	dir := t.TempDir()
	f := filepath.Join(dir, FileName)
	os.WriteFile(f, []byte("version: 1\n"), 0o644)
	d, err := Discover(dir)
	if err != nil || d.Path != f {
		t.Fatal(d, err)
	}
	os.Chown(f, 65534, 65534)
	if _, err := LoadDiscovered(d.Path); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Errorf("got %v", err)
	}
}

// A FIFO put where the walk found pinfold.yaml (a sandbox with rw access
// can swap it) is refused at once, not waited on.
func TestLoadDiscoveredFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "pinfold.yaml")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := LoadDiscovered(p); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a FIFO was loaded as a config")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("loading a FIFO in pinfold.yaml's place hung")
	}
}
