package gvisor

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/internal/nettest"
	"github.com/pinfold/pinfold/internal/store"
	"github.com/pinfold/pinfold/internal/trust/trusttest"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/container"
)

// runtime returns the runtime with runsc found, or skips (fails on CI).
func runtime(t *testing.T) *Runtime {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the gvisor runtime runs as root")
	}
	if os.Getenv(RunscEnv) == "" {
		if _, err := os.Stat("/var/cache/pinfold-tools/runsc"); err == nil {
			t.Setenv(RunscEnv, "/var/cache/pinfold-tools/runsc")
		}
	}
	rt := NewRuntime()
	if err := rt.Check(context.Background(), nil); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	return rt
}

// TestHostIDs: the processes that serve a gVisor sandbox (runsc's
// Sentry and gofer) hold no host root: they run as the sandbox range.
func TestHostIDs(t *testing.T) {
	rt := runtime(t)
	ws := t.TempDir()
	sb, err := rt.New(context.Background(), sandbox.Spec{Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	var out bytes.Buffer
	p, err := sb.Run(context.Background(), &sandbox.Cmd{Args: []string{"sh", "-c", "echo up > up; sleep 30"}, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Signal(os.Kill)
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(ws + "/up"); err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the command never started: %s", out.String())
		}
	}
	dir := sb.(*Sandbox).dir
	served := 0
	for _, pid := range processesUnder(dir) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if !bytes.Contains(cmdline, []byte("boot")) && !bytes.Contains(cmdline, []byte("gofer")) {
			continue // runsc run itself, pinfold's child on the host
		}
		served++
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 3 && (f[0] == "Uid:" || f[0] == "Gid:") {
				if f[2] != strconv.Itoa(store.RootIDBase) {
					t.Errorf("%s runs as %s %s, want the sandbox range's %d", bytes.ReplaceAll(cmdline[:min(len(cmdline), 40)], []byte{0}, []byte{' '}), f[0], f[2], store.RootIDBase)
				}
			}
		}
	}
	if served < 2 {
		t.Errorf("found %d of runsc's sandbox and gofer processes, want both", served)
	}
	p.Signal(os.Kill)
	if res, err := p.Wait(); err != nil || res.Reason != sandbox.ReasonKilled {
		t.Errorf("after a kill: %+v, %v", res, err)
	}
	if left := processesUnder(dir); len(left) > 0 {
		t.Errorf("processes left after the kill: %v", left)
	}
}

// TestRefused: what the runtime cannot enforce is refused before
// anything starts.
func TestRefused(t *testing.T) {
	rt := runtime(t)
	ws := t.TempDir()
	for _, sp := range []sandbox.Spec{
		{Workspace: ws, Network: sandbox.NetworkHost},
		{Workspace: ws, Capabilities: []string{"NET_RAW"}},
	} {
		var ue *sandbox.UnsupportedError
		if _, err := rt.New(context.Background(), sp); !errors.As(err, &ue) {
			t.Errorf("%+v: got %v, want a refusal", sp, err)
		}
	}
}

// TestRunscErrors: runsc's fatal line is kept from the command's stderr
// and read as an exec failure.
func TestRunscErrors(t *testing.T) {
	var out bytes.Buffer
	e := &runscErrors{w: &out}
	e.Write([]byte("the command's line\nrunning con"))
	e.Write([]byte("tainer: starting container: error finding executable \"nope\" in PATH [/bin]: no such file or directory\n"))
	e.Write([]byte("after\n"))
	if out.String() != "the command's line\nafter\n" {
		t.Errorf("passed on %q", out.String())
	}
	var xe *sandbox.ExecError
	if err := e.err(); !errors.As(err, &xe) || xe.Name != "nope" || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("got %v", err)
	}
	e = &runscErrors{}
	e.Write([]byte("running container: starting sandbox: creating process: failed to load /w/script: permission denied\n"))
	if err := e.err(); !errors.As(err, &xe) || xe.Name != "/w/script" || !errors.Is(err, fs.ErrPermission) {
		t.Errorf("got %v", err)
	}
}

func TestRunscErrorsFlush(t *testing.T) {
	var out bytes.Buffer
	e := &runscErrors{w: &out}
	e.Write([]byte("runn"))
	e.flush()
	if out.String() != "runn" {
		t.Errorf("held %q", out.String())
	}
}

// TestCloseWhileRunning: a command started before Close runs to its end,
// and the sandbox's directory goes with its last command.
func TestCloseWhileRunning(t *testing.T) {
	rt := runtime(t)
	ws := t.TempDir()
	sb, err := rt.New(context.Background(), sandbox.Spec{Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	dir := sb.(*Sandbox).dir
	var out bytes.Buffer
	p, err := sb.Run(context.Background(), &sandbox.Cmd{Args: []string{"sh", "-c", "sleep 1; echo after"}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	sb.Close()
	if _, err := sb.Run(context.Background(), &sandbox.Cmd{Args: []string{"true"}}); !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("run after close: %v", err)
	}
	res, err := p.Wait()
	if err != nil || res.ExitCode != 0 || out.String() != "after\n" {
		t.Fatalf("after close: %+v %v %q", res, err, out.String())
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the sandbox's directory is left: %v", err)
	}
}

// TestLimits: the limits hold on the processes that serve the sandbox:
// memory past --memory ends it as out of memory, a fork bomb past --pids
// is stopped, --cpus throttles the Sentry; within them commands run, and
// no group is left.
func TestLimits(t *testing.T) {
	rt := runtime(t)
	run := func(l sandbox.Limits, script string) *sandbox.Result {
		t.Helper()
		sb, err := rt.New(context.Background(), sandbox.Spec{Workspace: t.TempDir(), Access: sandbox.AccessReadWrite, Limits: l})
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close()
		var out bytes.Buffer
		p, err := sb.Run(context.Background(), &sandbox.Cmd{Args: []string{"sh", "-c", script}, Stdout: &out, Stderr: &out, Timeout: 60 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.Wait()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d %s %v %q", script, res.ExitCode, res.Reason, res.LimitsHit, out.String())
		return res
	}
	if r := run(sandbox.Limits{Memory: 128 << 20}, "head -c 40000000 /dev/zero | wc -c"); r.ExitCode != 0 || len(r.LimitsHit) > 0 {
		t.Errorf("within the memory limit: %+v", r)
	}
	if r := run(sandbox.Limits{Memory: 128 << 20}, "tail /dev/zero"); r.Reason != sandbox.ReasonOOM || !slices.Contains(r.LimitsHit, sandbox.LimitMemory) {
		t.Errorf("past the memory limit: %+v", r)
	}
	// Below what the Sentry needs to start: out of memory, not a failure
	// of runsc's.
	if r := run(sandbox.Limits{Memory: 8 << 20}, "true"); r.Reason != sandbox.ReasonOOM || !slices.Contains(r.LimitsHit, sandbox.LimitMemory) {
		t.Errorf("a memory limit too small for the Sentry: %+v", r)
	}
	if r := run(sandbox.Limits{Pids: 16}, "for i in $(seq 8); do sleep 1 & done; wait"); r.ExitCode != 0 || len(r.LimitsHit) > 0 {
		t.Errorf("within the pids limit: %+v", r)
	}
	if r := run(sandbox.Limits{Pids: 16}, "f() { f | f & }; f; sleep 30"); r.ExitCode == 0 || !slices.Contains(r.LimitsHit, sandbox.LimitPids) || r.Duration > 25*time.Second {
		t.Errorf("a fork bomb past the pids limit: %+v", r)
	}
	// Half a CPU for 3 s of spinning: the host CPU time of runsc and its
	// Sentry (children waited for) stays near 1.5 s, not 3.
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &before)
	if r := run(sandbox.Limits{CPUs: 0.5}, "timeout 3 sh -c 'while :; do :; done'; exit 0"); r.ExitCode != 0 {
		t.Errorf("cpus: %+v", r)
	}
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &after)
	used := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	t.Logf("CPU time under --cpus 0.5 for 3 s: %s", used)
	if used > 2200*time.Millisecond {
		t.Errorf("--cpus 0.5 let the sandbox use %s of CPU in 3 s", used)
	}
	if left, _ := filepath.Glob("/sys/fs/cgroup/*/pinfold/" + container.Owner() + "-g*"); len(left) > 0 {
		t.Errorf("groups left: %v", left)
	}
}

// TestPidsBoundThreads: the Sentry runs a process's threads on a few host
// threads, so the host group alone let a command start any number of
// threads past --pids (300 of 300 with --pids 16); RLIMIT_NPROC bounds
// them at the host group's limit.
func TestPidsBoundThreads(t *testing.T) {
	rt := runtime(t)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 on the host base")
	}
	sb, err := rt.New(context.Background(), sandbox.Spec{Access: sandbox.AccessNone, Limits: sandbox.Limits{Pids: 16}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	script := `import threading
ev, n = threading.Event(), 0
try:
    for i in range(400):
        threading.Thread(target=ev.wait, daemon=True).start(); n += 1
except Exception:
    pass
print(n, flush=True)
ev.set()
`
	var out bytes.Buffer
	p, err := sb.Run(context.Background(), &sandbox.Cmd{Args: []string{"python3", "-c", script}, Stdout: &out, Stderr: &out, Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(out.String()))
	if err != nil {
		t.Fatalf("%q %+v", out.String(), res)
	}
	if max := hostLimits(sandbox.Limits{Pids: 16}).Pids; int64(n) >= max {
		t.Errorf("--pids 16: the command started %d threads, want fewer than %d", n, max)
	}
}

// TestHostLoopback: with --host-loopback the command reaches a server on
// the host's 127.0.0.1 at 10.0.2.2 through pinfold's stack; without it
// the stack refuses and logs the attempt.
func TestHostLoopback(t *testing.T) {
	rt := runtime(t)
	tools := t.TempDir()
	os.Chmod(tools, 0o755)
	client, err := nettest.BuildClient(tools)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			bufio.NewReader(c).ReadString('\n')
			c.Write([]byte("echo ping\n"))
			c.Close()
		}
	}()
	addr := "10.0.2.2:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	dial := func(hostLoopback bool) (string, *sandbox.Result) {
		sb, err := rt.New(context.Background(), sandbox.Spec{Network: sandbox.NetworkOutbound, Net: sandbox.NetPolicy{HostLoopback: hostLoopback},
			Mounts: []sandbox.Mount{{Source: client, Target: "/pinfold-test/netclient", ReadOnly: true}}})
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close()
		var out bytes.Buffer
		p, err := sb.Run(context.Background(), &sandbox.Cmd{Args: []string{"/pinfold-test/netclient", "tcp", addr}, Stdout: &out, Stderr: &out, Timeout: 60 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.Wait()
		if err != nil {
			t.Fatal(err)
		}
		return out.String(), res
	}
	if out, _ := dial(true); !strings.Contains(out, `"out":"echo ping"`) {
		t.Errorf("with --host-loopback: %s", out)
	}
	out, res := dial(false)
	if strings.Contains(out, "echo ping") || len(res.Violations) == 0 {
		t.Errorf("without --host-loopback: %s %+v", out, res.Violations)
	}
}

// TestResolvTarget: pinfold's resolv.conf goes over the base's, or where
// the base's links to (systemd-resolved's link into /run, which the
// skeleton can hold); a base with an /etc but no resolv.conf is refused.
func TestResolvTarget(t *testing.T) {
	base := t.TempDir()
	os.Mkdir(base+"/etc", 0o755)
	top := map[string]bool{"etc": true, "usr": true}
	if _, err := resolvTarget(base, top); err == nil {
		t.Error("no resolv.conf: no error")
	}
	os.WriteFile(base+"/etc/resolv.conf", nil, 0o644)
	if got, err := resolvTarget(base, top); err != nil || got != "/etc/resolv.conf" {
		t.Errorf("a file: %q %v", got, err)
	}
	os.Remove(base + "/etc/resolv.conf")
	os.Symlink("../run/systemd/resolve/stub-resolv.conf", base+"/etc/resolv.conf")
	if got, err := resolvTarget(base, top); err != nil || got != "/run/systemd/resolve/stub-resolv.conf" {
		t.Errorf("a link into /run: %q %v", got, err)
	}
	os.Remove(base + "/etc/resolv.conf")
	os.Symlink("/usr/resolv.conf", base+"/etc/resolv.conf")
	if _, err := resolvTarget(base, top); err == nil {
		t.Error("a link to a file the base lacks: no error")
	}
	if got, err := resolvTarget(base, map[string]bool{"usr": true}); err != nil || got != "/etc/resolv.conf" {
		t.Errorf("a base without /etc: %q %v", got, err)
	}
}

// TestResolvTargetStaysInBase: the base's links are resolved in the
// base's root, as the sandbox does, never on the host: a link (in /etc,
// in a directory of /run, or /etc itself) to a host directory holding a
// resolv.conf does not count as the base's file, and a link to another of
// the base's directories is followed there, not on the host.
func TestResolvTargetStaysInBase(t *testing.T) {
	host := t.TempDir() // a host directory the base's links name
	os.WriteFile(host+"/resolv.conf", nil, 0o644)
	top := map[string]bool{"etc": true, "run": true, "srv": true}

	base := t.TempDir()
	os.Mkdir(base+"/etc", 0o755)
	os.MkdirAll(base+"/run", 0o755)
	os.Symlink("/run/x/resolv.conf", base+"/etc/resolv.conf")
	os.Symlink(host, base+"/run/x")
	if got, err := resolvTarget(base, top); err == nil {
		t.Errorf("/run/x a link to a host directory: %q accepted (resolved on the host)", got)
	}

	base = t.TempDir()
	os.Symlink(host, base+"/etc")
	if got, err := resolvTarget(base, top); err == nil {
		t.Errorf("/etc a link to a host directory: %q accepted (resolved on the host)", got)
	}

	// A link to the base's own /srv/y: the host has no such directory.
	base = t.TempDir()
	os.Mkdir(base+"/etc", 0o755)
	os.MkdirAll(base+"/run", 0o755)
	os.MkdirAll(base+"/srv/y", 0o755)
	os.WriteFile(base+"/srv/y/resolv.conf", nil, 0o644)
	os.Symlink("/run/x/resolv.conf", base+"/etc/resolv.conf")
	os.Symlink("/srv/y", base+"/run/x")
	if got, err := resolvTarget(base, top); err != nil || got != "/run/x/resolv.conf" {
		t.Errorf("/run/x a link to the base's /srv/y: %q %v", got, err)
	}
	// A mount point in the base (point): the same resolution.
	if err := existsIn(base, "/run/x/resolv.conf"); err != nil {
		t.Errorf("a mount point through the base's link: %v", err)
	}
	os.Remove(base + "/run/x")
	os.Symlink(host, base+"/run/x")
	if err := existsIn(base, "/run/x/resolv.conf"); err == nil {
		t.Error("a mount point through a link to a host directory: found on the host")
	}
}

// TestRegistryBase: an oci base given by a registry reference (here a
// registry on the loopback) is pulled into the store, as for a native
// sandbox, and the command runs from it.
func TestRegistryBase(t *testing.T) {
	rt := runtime(t)
	rt.store = t.TempDir()
	if _, err := exec.LookPath("skopeo"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("pulling needs skopeo (scripts/test-setup.sh installs it)")
		}
		t.Skip("pulling needs skopeo")
	}
	dir := t.TempDir()
	bin, err := nettest.BuildClient(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	tw.WriteHeader(&tar.Header{Name: "netclient", Mode: 0o755, Size: int64(len(b)), Typeflag: tar.TypeReg})
	tw.Write(b)
	tw.Close()
	reg := trusttest.NewRegistry(t)
	reg.PushImage("team/tool", "1", layer.Bytes())
	sb, err := rt.New(context.Background(), sandbox.Spec{Base: sandbox.Base{Kind: sandbox.BaseOCI, Ref: reg.Addr + "/team/tool:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	var out bytes.Buffer
	p, err := sb.Run(context.Background(), &sandbox.Cmd{Args: []string{"/netclient", "tcp", "127.0.0.1:1"}, Stdout: &out, Stderr: &out, Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait()
	if err != nil || res.ExitCode != 0 || !strings.Contains(out.String(), `"err":`) {
		t.Errorf("from the pulled base: %+v %v %q", res, err, out.String())
	}
}

// TestFreshDir: on a machine where no gVisor run was made yet, the
// runtime's directory is made so that the sandbox's ids reach their
// bundle, and the shared root beside it.
func TestFreshDir(t *testing.T) {
	rt := runtime(t)
	parent, err := os.MkdirTemp("/run", "pinfold-gvisor-test-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(parent, 0o711)
	old := Dir
	Dir = filepath.Join(parent, "gvisor")
	defer func() {
		// runsc keeps its gofers' network namespace in the shared root.
		unix.Unmount(filepath.Join(Dir, sharedRoot, "null-netns"), unix.MNT_DETACH)
		os.RemoveAll(parent)
		Dir = old
	}()
	sb, err := rt.New(context.Background(), sandbox.Spec{Workspace: t.TempDir(), Access: sandbox.AccessReadWrite})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	var out bytes.Buffer
	p, err := sb.Run(context.Background(), &sandbox.Cmd{Args: []string{"echo", "fresh"}, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := p.Wait(); err != nil || res.ExitCode != 0 || out.String() != "fresh\n" {
		t.Errorf("in a fresh directory: %+v %v %q", res, err, out.String())
	}
	if fi, err := os.Stat(filepath.Join(Dir, sharedRoot)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the shared root: %v %v", fi, err)
	}
}
