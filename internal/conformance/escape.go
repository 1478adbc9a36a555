package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/sandbox"
)

// The escape scenarios: what a sandbox must not reach on the host, the
// same on every runtime. The rule they test: a sandbox holds no host
// privilege the caller did not grant. Its command runs as a host id that
// is not root, with no capabilities but those granted, whatever it is
// inside (--user root included), so the host's root-only files in the
// system directories it is shown stay unreadable (root-only-files); it
// sees no host file, socket, sysfs or process beyond what it was given
// and writes nothing outside its workspace (host-files,
// kernel-surfaces); what it writes in the workspace belongs to the
// workspace's owner (workspace-owner); a granted capability works on its
// own network only (capabilities). Each has a control that fails the
// scenario when its probe could not tell. (sandbox/native's escape suite
// tests the native runtime's protections one by one.)

// rootOnlyProbe prints what the command can tell about its privileges on
// the host: the root-only files of /etc it can read (with a
// world-readable one as the control that cat works), its id inside, its
// id map (inside, outside, count) and its effective capabilities.
const rootOnlyProbe = `for f in /etc/passwd /etc/shadow /etc/gshadow; do
  test -e "$f" && echo "exists $f"
  cat "$f" >/dev/null 2>&1 && echo "read $f"
done
echo "uid $(id -u) gid $(id -g)"
sed 's/^/uidmap /' /proc/self/uid_map
sed 's/^/gidmap /' /proc/self/gid_map
grep '^CapEff:' /proc/self/status`

// rootOnlyFiles runs the probe as the default user and as root inside.
func rootOnlyFiles(e *Env) {
	if e.Target.Base == "" {
		// The probe tells only if the host's files are root-only.
		for _, f := range []string{"/etc/shadow", "/etc/gshadow"} {
			if fi, err := os.Stat(f); err == nil && fi.Mode().Perm()&0o004 != 0 {
				e.T.Fatalf("%s is world-readable on this host: the probe cannot tell", f)
			}
		}
	}
	for _, user := range []string{"", "root"} {
		f := e.rw()
		f.User = user
		if user == "root" && !e.Runtime.Features().Root {
			// A runtime without root inside must refuse it.
			var ue *sandbox.UnsupportedError
			if err := e.StartErr(f, "true"); !errors.As(err, &ue) {
				e.T.Errorf("--user root on a runtime without it: got %v, want a refusal", err)
			}
			continue
		}
		r := e.Exec(f, "sh", "-c", rootOnlyProbe)
		if r == nil {
			return
		}
		checkRootOnly(e, user, r)
	}
}

func checkRootOnly(e *Env, user string, r *Result) {
	e.T.Helper()
	who := "the default user"
	if user != "" {
		who = "--user " + user
	}
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	has := func(l string) bool {
		for _, x := range lines {
			if x == l {
				return true
			}
		}
		return false
	}
	if r.Out.Result.ExitCode != 0 || !has("read /etc/passwd") {
		e.T.Fatalf("%s: the probe did not run (control: /etc/passwd unread): exit %d\n%s%s", who, r.Out.Result.ExitCode, r.Stdout, r.Stderr)
	}
	if !has("exists /etc/shadow") {
		if e.Target.Base == "" {
			e.T.Fatalf("%s: the host base shows no /etc/shadow: the probe cannot tell\n%s", who, r.Stdout)
		}
		// A base without root-only files (the cluster's busybox) has
		// nothing of the host's to read: its ids below still tell.
		e.T.Logf("%s: the base %s has no /etc/shadow; checking the ids only", who, e.Target.Base)
	}
	for _, f := range []string{"/etc/shadow", "/etc/gshadow"} {
		if has("read " + f) {
			e.T.Errorf("%s read the root-only %s", who, f)
		}
	}
	var uid, gid uint64
	var uidMap, gidMap []string
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "uid "):
			if _, err := fmt.Sscanf(l, "uid %d gid %d", &uid, &gid); err != nil {
				e.T.Fatalf("%s: %q: %v", who, l, err)
			}
		case strings.HasPrefix(l, "uidmap "):
			uidMap = append(uidMap, strings.TrimPrefix(l, "uidmap "))
		case strings.HasPrefix(l, "gidmap "):
			gidMap = append(gidMap, strings.TrimPrefix(l, "gidmap "))
		case strings.HasPrefix(l, "CapEff:"):
			if v := strings.TrimSpace(strings.TrimPrefix(l, "CapEff:")); strings.Trim(v, "0") != "" {
				e.T.Errorf("%s has capabilities: CapEff %s", who, v)
			}
		}
	}
	if e.Target.GuestKernel != "" {
		e.T.Logf("%s: uid %d gid %d on a guest kernel: %s", who, uid, gid, e.Target.GuestKernel)
		return
	}
	hu, ok := outside(uidMap, uid)
	if !ok {
		e.T.Fatalf("%s: uid %d is not in its map %q", who, uid, uidMap)
	}
	hg, ok := outside(gidMap, gid)
	if !ok {
		e.T.Fatalf("%s: gid %d is not in its map %q", who, gid, gidMap)
	}
	if os.Geteuid() == 0 && (hu == 0 || hg == 0) {
		e.T.Errorf("%s runs as host uid %d gid %d (inside %d:%d): host root", who, hu, hg, uid, gid)
	}
}

// outside maps id through the lines of a /proc/PID/uid_map ("inside
// outside count") to the id of the parent user namespace.
func outside(m []string, id uint64) (uint64, bool) {
	for _, l := range m {
		f := strings.Fields(l)
		if len(f) != 3 {
			continue
		}
		in, err1 := strconv.ParseUint(f[0], 10, 64)
		out, err2 := strconv.ParseUint(f[1], 10, 64)
		n, err3 := strconv.ParseUint(f[2], 10, 64)
		if err1 == nil && err2 == nil && err3 == nil && id >= in && id-in < n {
			return out + id - in, true
		}
	}
	return 0, false
}

// workspaceOwner gives the workspace to an ordinary user: the command
// sees the workspace as its own, and what it writes there, directly or
// through an applied changeset, belongs to that user on the host, never
// to an id of the sandbox's.
func workspaceOwner(e *Env) {
	if os.Geteuid() != 0 {
		e.T.Fatal("the scenario gives the workspace to another user: it runs as root")
	}
	const owner = 4321
	if err := os.Chown(e.Workspace, owner, owner); err != nil {
		e.T.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.Workspace, "kept"), []byte("old\n"), 0o644); err != nil {
		e.T.Fatal(err)
	}
	os.Chown(filepath.Join(e.Workspace, "kept"), owner, owner)
	apply := func(r *Result) {
		e.T.Helper()
		cs := r.Out.Changeset
		if cs == nil || cs.Empty {
			return
		}
		c, err := e.Engine.OpenChangeset(cs.ID, "")
		if err != nil {
			e.T.Fatal(err)
		}
		unlock, err := engine.Lock(c)
		if err != nil {
			e.T.Fatal(err)
		}
		_, err = e.Engine.Apply(context.Background(), c, nil, false)
		unlock()
		if err != nil {
			e.T.Fatal(err)
		}
	}
	probe := `[ "$(stat -c %u .)" = "$(id -u)" ] || echo "workspace owned by $(stat -c %u:%g .), command is $(id -u)"
echo new > "$1"; mkdir "$1.d"; echo changed > kept`
	for _, access := range []string{"rw", "changeset"} {
		name := "made-" + access
		r := e.Exec(plan.Flags{Access: access}, "sh", "-c", probe, "sh", name)
		if r == nil {
			return
		}
		if r.Out.Result.ExitCode != 0 || r.Stdout != "" {
			e.T.Errorf("%s: exit %d: %s%s", access, r.Out.Result.ExitCode, r.Stdout, r.Stderr)
		}
		apply(r)
		files := []string{name, name + ".d", "kept"}
		// An empty workspace too (the engines may treat its mount as
		// fresh and give it an owner of theirs).
		empty := filepath.Join(e.Workspace, "empty-"+access)
		if err := os.Mkdir(empty, 0o755); err != nil {
			e.T.Fatal(err)
		}
		os.Chown(empty, owner, owner)
		r = e.Exec(plan.Flags{Access: access, Workspace: empty}, "sh", "-c", `echo new > "$1"`, "sh", name)
		if r.Out.Result.ExitCode != 0 {
			e.T.Errorf("%s, an empty workspace: exit %d: %s%s", access, r.Out.Result.ExitCode, r.Stdout, r.Stderr)
		}
		apply(r)
		files = append(files, filepath.Join(filepath.Base(empty), name))
		for _, f := range files {
			var st syscall.Stat_t
			if err := syscall.Lstat(filepath.Join(e.Workspace, f), &st); err != nil {
				e.T.Errorf("%s: %s: %v", access, f, err)
				continue
			}
			if st.Uid != owner || st.Gid != owner {
				e.T.Errorf("%s: %s belongs to %d:%d on the host, want the workspace's owner %d:%d", access, f, st.Uid, st.Gid, owner, owner)
			}
		}
	}
}

// hostFiles: the host's files outside the system directories, its
// daemons' sockets and pinfold's own state are not there, and nothing
// outside the workspace is writable, through a link in the workspace
// either.
func hostFiles(e *Env) {
	secret := e.T.TempDir()
	os.Chmod(secret, 0o755)
	if err := os.WriteFile(filepath.Join(secret, "secret"), []byte("host secret\n"), 0o644); err != nil {
		e.T.Fatal(err)
	}
	mark := fmt.Sprintf("pinfold-pwned-%d", os.Getpid())
	hidden := []string{secret, "/run/docker.sock", "/var/run/docker.sock", "/run/podman/podman.sock",
		"/run/dbus/system_bus_socket", "/run/pinfold", "/tmp/.X11-unix"}
	if e.Target.Base == "" {
		// On the host base these could only be the host's; another base
		// may have its own.
		hidden = append(hidden, "/root", "/home", "/boot", "/var/lib/docker", "/var/lib/containers")
	}
	written := []string{"/etc/" + mark, "/usr/bin/" + mark, "/" + mark}
	probe := `for p in ` + strings.Join(hidden, " ") + `; do test -e "$p" && echo "sees $p"; done
for p in ` + strings.Join(written, " ") + `; do (echo x > "$p") 2>/dev/null && echo "wrote $p"; done
ln -s / escape && { (echo x > escape/etc/` + mark + `) 2>/dev/null && echo "wrote through a link"; }
cat escape/etc/hostname >/dev/null && echo "control: the link resolves"
true`
	r := e.Exec(e.rw(), "sh", "-c", probe)
	if r == nil {
		return
	}
	if !strings.Contains(r.Stdout, "control: the link resolves") {
		e.T.Errorf("the probe did not run: %q %q", r.Stdout, r.Stderr)
	}
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		if l != "" && !strings.HasPrefix(l, "control:") {
			e.T.Errorf("the sandbox %s", l)
		}
	}
	// Control: the same look sees the secret when it is mounted.
	if e.Runtime.Features().Mounts {
		f := e.rw()
		f.Mounts = append(f.Mounts, secret+":"+secret+":ro")
		c := e.Exec(f, "sh", "-c", `test -e "$1/secret" && echo "sees $1"`, "sh", secret)
		if c != nil && c.Stdout != "sees "+secret+"\n" {
			e.T.Errorf("control: a mounted directory is not seen: %q %q", c.Stdout, c.Stderr)
		}
	}
	for _, p := range append(written, "/etc/"+mark) {
		if _, err := os.Lstat(p); err == nil {
			os.Remove(p)
			e.T.Errorf("the sandbox wrote %s on the host", p)
		}
	}
}

// capabilities: a capability the plan grants works on the sandbox's own
// network, with pinfold's network stack too, and without it the same bind
// is refused: privileges inside are the sandbox's, not the host's.
func capabilities(e *Env) {
	if e.Target.Tools == "" && !e.Refusing() {
		e.T.Fatal("the scenario binds a port with the test tools' netclient")
	}
	// The server still running after a second bound the port; a refused
	// bind ends it at once.
	const probe = `/pinfold-test/netclient serve 80 >/dev/null 2>&1 & pid=$!; sleep 1; kill $pid 2>/dev/null && echo BOUND; true`
	networks := []string{"none"}
	if slices.Contains(e.Runtime.Features().Networks, sandbox.NetworkAllow) {
		networks = append(networks, "allow")
	}
	for _, n := range networks {
		for _, grant := range []bool{true, false} {
			f := e.rw()
			f.Network = n
			if n == "allow" {
				f.Allow = []string{"allowed.test"}
			}
			if grant {
				f.CapAdd = []string{"NET_BIND_SERVICE"}
			}
			r := e.Exec(f, "sh", "-c", probe)
			if r == nil {
				return
			}
			if got := strings.Contains(r.Stdout, "BOUND"); got != grant {
				e.T.Errorf("network %s, NET_BIND_SERVICE granted %v: bound port 80 %v (%q %q)", n, grant, got, r.Stdout, r.Stderr)
			}
		}
	}
}

// kernelSurfaces: nothing of the host's sysfs, the kernel's sensitive
// /proc files empty or unreadable, its tunables and the hostname not
// writable, and host processes neither seen nor signalled.
func kernelSurfaces(e *Env) {
	pid := strconv.Itoa(os.Getpid())
	probe := `ls -A /sys | grep -vx fs | sed 's/^/sys shows /'
ls -A /sys/fs 2>/dev/null | grep -vx cgroup | sed 's|^|sys shows fs/|'
for f in /proc/kcore /proc/keys /proc/timer_list /proc/sched_debug; do
  test -e "$f" && [ "$(head -c 64 "$f" 2>/dev/null | wc -c)" -gt 0 ] && echo "read $f"
done
for f in /proc/sysrq-trigger /proc/sys/kernel/hostname /proc/sys/vm/drop_caches; do
  test -e "$f" && (echo 1 > "$f") 2>/dev/null && echo "wrote $f"
done
hostname pinfold-pwned 2>/dev/null && echo "set the hostname"
kill -0 ` + pid + ` 2>/dev/null && echo "signals host pid ` + pid + `"
n=$(ls /proc | grep -c '^[0-9]')
[ "$n" -gt 8 ] && echo "sees $n processes"
test -e /proc/self/status && echo "control: /proc is there"
true`
	r := e.Exec(e.rw(), "sh", "-c", probe)
	if r == nil {
		return
	}
	if !strings.Contains(r.Stdout, "control: /proc is there") {
		e.T.Fatalf("the probe did not run: %q %q", r.Stdout, r.Stderr)
	}
	sysfs := 0
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		switch {
		case l == "" || strings.HasPrefix(l, "control:"):
		case strings.HasPrefix(l, "sys shows ") && e.Target.SysfsShown != "":
			sysfs++
		default:
			e.T.Errorf("the sandbox %s", l)
		}
	}
	if sysfs > 0 {
		e.T.Logf("known gap: /sys shows %d host entries: %s", sysfs, e.Target.SysfsShown)
	}
}
