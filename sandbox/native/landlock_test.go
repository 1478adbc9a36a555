package native_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/pinfold/pinfold/internal/landlock"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/native"
)

// requireLandlock skips where the kernel has no Landlock (and fails on
// CI, whose machines have it: the layer must not go untested there).
func requireLandlock(t *testing.T, abi int) {
	t.Helper()
	requireRoot(t)
	if landlock.ABI() < abi {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the kernel's Landlock ABI is %d, the test needs %d", landlock.ABI(), abi)
		}
		t.Skipf("the kernel's Landlock ABI is %d, the test needs %d", landlock.ABI(), abi)
	}
}

// withLandlock runs probe with the layer on, then off (PINFOLD_LANDLOCK=0),
// and returns both results.
func withLandlock(t *testing.T, spec func() sandbox.Spec, args ...string) (on, off probe) {
	t.Helper()
	name := args[0]
	if len(args) > 1 {
		for _, a := range args[1:] {
			name += " " + a
		}
	}
	on = attack(t, spec(), args...)[name]
	t.Setenv(landlock.Env, "0")
	off = attack(t, spec(), args...)[name]
	t.Setenv(landlock.Env, "")
	return on, off
}

// A path the sandbox shows but the ruleset does not grant is unreadable:
// only Landlock stands between the command and the file.
func TestLandlockUngrantedMount(t *testing.T) {
	requireLandlock(t, landlock.MinABI)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("s3cret"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	native.SetTestLandlock(t, []string{"/ungranted"}, nil)
	spec := func() sandbox.Spec {
		s := baseSpec(t)
		s.Mounts = append(s.Mounts, sandbox.Mount{Source: dir, Target: "/ungranted", ReadOnly: true})
		return s
	}
	on, off := withLandlock(t, spec, "read", "/ungranted/secret")
	if on.Err != "EACCES" {
		t.Errorf("Landlock on: reading an ungranted path: err %q out %q, want EACCES", on.Err, on.Out)
	}
	if off.Err != "" || off.Out != "s3cret" {
		t.Errorf("Landlock off: the mount is not there to read: err %q out %q", off.Err, off.Out)
	}
	// The host's paths the base does not show stay absent, with or without.
	on, off = withLandlock(t, spec, "read", "/root/.bashrc")
	if on.Err != "ENOENT" || off.Err != "ENOENT" {
		t.Errorf("a host path outside the base: %q with Landlock, %q without, want ENOENT", on.Err, off.Err)
	}
}

// A writable mount granted only reading refuses writes: the mount allows
// them, Landlock does not.
func TestLandlockReadOnlyGrant(t *testing.T) {
	requireLandlock(t, landlock.MinABI)
	dir := t.TempDir()
	os.Chmod(dir, 0o777)
	native.SetTestLandlock(t, nil, []string{"/rw"})
	spec := func() sandbox.Spec {
		s := baseSpec(t)
		s.Mounts = append(s.Mounts, sandbox.Mount{Source: dir, Target: "/rw"})
		return s
	}
	on, off := withLandlock(t, spec, "write", "/rw/f")
	if on.Err != "EACCES" {
		t.Errorf("Landlock on: writing a path granted read-only: err %q, want EACCES", on.Err)
	}
	if off.Err != "" {
		t.Errorf("Landlock off: writing the rw mount: %q", off.Err)
	}
	// The ordinary grants: the workspace (rw) and /tmp are writable.
	for _, p := range []string{"/tmp/f", filepath.Join(spec().Workspace, "f")} {
		s := spec()
		s.Access = sandbox.AccessReadWrite
		if p != "/tmp/f" {
			p = filepath.Join(s.Workspace, "f")
		}
		if got := attack(t, s, "write", p)["write "+p]; got.Err != "" {
			t.Errorf("writing %s with Landlock: %q", p, got.Err)
		}
	}
}

// With network none, TCP bind and connect are denied by Landlock (ABI 4),
// even on the sandbox's own loopback. The attacker is a Go program, whose
// listeners try MPTCP first, which Landlock's TCP rules do not cover: the
// bind is denied only because the init turned MPTCP off.
func TestLandlockNetworkNone(t *testing.T) {
	requireLandlock(t, 4)
	spec := func() sandbox.Spec { return baseSpec(t) }
	on, off := withLandlock(t, spec, "listen", "tcp", "127.0.0.1:8080")
	if on.Err != "EACCES" || off.Err != "" {
		t.Errorf("binding loopback with network none: %q with Landlock, %q without; want EACCES and success", on.Err, off.Err)
	}
	on, off = withLandlock(t, spec, "connect", "tcp", "127.0.0.1:9")
	if on.Err != "EACCES" || off.Err != "ECONNREFUSED" {
		t.Errorf("connecting on loopback with network none: %q with Landlock, %q without; want EACCES and ECONNREFUSED", on.Err, off.Err)
	}
}

// What a command does in its writable places works under Landlock:
// renames between directories (the Refer right), links, fifos, removal.
func TestLandlockOrdinaryWrites(t *testing.T) {
	requireLandlock(t, landlock.MinABI)
	spec := baseSpec(t)
	spec.Access = sandbox.AccessReadWrite
	script := `set -e
for d in "$1" /tmp /dev/shm; do
  cd "$d"; mkdir -p a b; echo x > a/f; mv a/f b/f; ln -s b/f l; ln b/f h; mkfifo p
  : > b/f; cat l h; rm -r a b l h p
done
echo done`
	res, out, errs := run(t, spec, &sandbox.Cmd{Args: []string{"sh", "-c", script, "sh", spec.Workspace}})
	if res.ExitCode != 0 || out != "done\n" {
		t.Errorf("ordinary writes under Landlock: exit %d, %q %q", res.ExitCode, out, errs)
	}
}
