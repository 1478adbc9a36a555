package native_test

import (
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

	"github.com/pinfold/pinfold/internal/landlock"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/native"
	"golang.org/x/sys/unix"
)

// The escape suite: attacks from inside a sandbox on the host. Each test
// runs the attacker (testdata/attacker) in a real sandbox and checks that
// the attempt failed for the right reason. Positive controls (the same
// probe with the protection relaxed) show the probes can tell.

func TestEscapeHostFiles(t *testing.T) {
	secretDir := t.TempDir()
	secret := filepath.Join(secretDir, "secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := baseSpec(t)
	p := attack(t, spec, "read", secret)
	want(t, p, "read "+secret, "ENOENT")
	for _, path := range []string{"/root", "/home", "/var/lib", "/run", "/var/run", "/boot"} {
		want(t, attack(t, spec, "ls", path), "ls "+path, "ENOENT")
	}
	want(t, attack(t, spec, "read", "/etc/shadow"), "read /etc/shadow", "EACCES")
	for _, path := range []string{"/etc/pinfold-pwned", "/usr/bin/pinfold-pwned", "/pinfold-pwned", "/dev/pinfold-pwned", "/sys/pinfold-pwned"} {
		want(t, attack(t, spec, "write", path), "write "+path, "EROFS")
	}
	// A link in the workspace to / resolves inside the sandbox, never on the host.
	want(t, attack(t, spec, "symlink-escape", spec.Workspace), "symlink-escape", "EROFS")
	if _, err := os.Stat("/etc/pinfold-pwned"); err == nil {
		t.Fatal("the sandbox wrote /etc/pinfold-pwned on the host")
	}
	// Positive control: the same secret is readable when mounted in.
	spec.Mounts = append(spec.Mounts, sandbox.Mount{Source: secretDir, Target: secretDir, ReadOnly: true})
	if got := attack(t, spec, "read", secret)["read "+secret]; got.Err != "" || got.Out != "host secret" {
		t.Fatalf("control: mounted secret not readable: %+v", got)
	}
}

func TestEscapeHostSockets(t *testing.T) {
	spec := baseSpec(t)
	for _, path := range []string{"/run/docker.sock", "/var/run/docker.sock", "/run/podman/podman.sock",
		"/run/dbus/system_bus_socket", "/var/run/dbus/system_bus_socket", "/tmp/.X11-unix"} {
		want(t, attack(t, spec, "stat", path), "stat "+path, "ENOENT")
	}
}

func TestEscapeSysAndProc(t *testing.T) {
	spec := baseSpec(t)
	if got := attack(t, spec, "ls", "/sys")["ls /sys"]; got.Err != "" || got.Out != "" {
		t.Errorf("/sys shows host content: %+v", got)
	}
	want(t, attack(t, spec, "ls", "/sys/fs/cgroup"), "ls /sys/fs/cgroup", "ENOENT")
	for _, f := range []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/kallsyms"} {
		if got := attack(t, spec, "read", f)["read "+f]; got.Out != "" {
			t.Errorf("%s is readable: %d bytes", f, len(got.Out))
		}
	}
	for _, f := range []string{"/proc/sysrq-trigger", "/proc/sys/kernel/hostname", "/proc/sys/vm/drop_caches"} {
		if _, err := os.Stat(f); err != nil {
			continue // not in this kernel
		}
		want(t, attack(t, spec, "write", f), "write "+f, "EROFS", "EACCES")
	}
	want(t, attack(t, spec, "hostname"), "sethostname", "EPERM")
	if got := attack(t, spec, "uname")["hostname"]; got.Out != "sandbox" {
		t.Errorf("hostname %q, want sandbox", got.Out)
	}
	got := attack(t, spec, "cgroup")["cgroup"]
	for _, l := range strings.Split(strings.TrimSpace(got.Out), "\n") {
		if !strings.HasSuffix(l, ":/") {
			t.Errorf("cgroup namespace shows a host path: %q", l)
		}
	}
}

func TestEscapeHostProcesses(t *testing.T) {
	spec := baseSpec(t)
	procs := strings.Fields(attack(t, spec, "procs")["procs"].Out)
	if len(procs) > 2 {
		t.Errorf("sandbox sees %d processes, want the init and itself: %v", len(procs), procs)
	}
	self := strconv.Itoa(os.Getpid())
	want(t, attack(t, spec, "kill", self, "0"), "kill "+self, "ESRCH")
	want(t, attack(t, spec, "ptrace", "1"), "ptrace 1", "EPERM")
	// Signals to the init from inside are ignored; it keeps running.
	res, out, _ := run(t, spec, &sandbox.Cmd{Args: []string{"sh", "-c",
		attackerPath + " kill 1 9; " + attackerPath + " kill 1 15; " + attackerPath + " procs; exit 7"}})
	if res.ExitCode != 7 || !strings.Contains(out, `"procs"`) {
		t.Errorf("init did not survive signals from inside: status %d, %s", res.ExitCode, out)
	}
}

func TestEscapeSupervisorBinary(t *testing.T) {
	spec := baseSpec(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(self, &st); err != nil {
		t.Fatal(err)
	}
	host := "dev=" + strconv.FormatUint(st.Dev, 10) + " ino=" + strconv.FormatUint(st.Ino, 10)
	p := attack(t, spec, "exes")
	if len(p) == 0 {
		t.Fatal("no exes probed")
	}
	want(t, p, "exe 1", "EACCES")
	want(t, p, "exe-open-rw 1", "EACCES")
	for name, r := range p {
		if strings.Contains(r.Out, host) {
			t.Errorf("%s resolves to the supervisor's binary: %+v", name, r)
		}
		if strings.HasPrefix(name, "exe-open-rw") && r.Err == "" {
			t.Errorf("%s: a process image is writable", name)
		}
	}
}

func TestEscapeNetwork(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	abstract := "@pinfold-test-" + strconv.Itoa(os.Getpid())
	ua, err := net.Listen("unix", abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer ua.Close()
	go func() {
		for {
			c, err := ua.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	spec := baseSpec(t)
	addr := ln.Addr().String()
	// The empty network namespace on its own (Landlock, which denies TCP
	// before it gets there, is TestLandlockNetworkNone's).
	t.Setenv(landlock.Env, "0")
	want(t, attack(t, spec, "connect", "tcp", addr), "connect tcp "+addr, "ECONNREFUSED")
	want(t, attack(t, spec, "connect", "unix", abstract), "connect unix "+abstract, "ECONNREFUSED")
	want(t, attack(t, spec, "connect", "tcp", "192.0.2.1:80"), "connect tcp 192.0.2.1:80", "ENETUNREACH")
	if got := attack(t, spec, "ifaces")["ifaces"]; got.Out != "lo" {
		t.Errorf("interfaces %q, want lo only", got.Out)
	}
	t.Setenv(landlock.Env, "")
	tcpDenied := "ECONNREFUSED"
	if landlock.ABI() >= 4 {
		tcpDenied = "EACCES"
	}
	want(t, attack(t, spec, "connect", "tcp", addr), "connect tcp "+addr, tcpDenied)
	want(t, attack(t, spec, "connect", "unix", abstract), "connect unix "+abstract, "ECONNREFUSED")
	// Positive control: with the host's network both are reachable.
	spec.Network = sandbox.NetworkHost
	for _, c := range [][]string{{"tcp", addr}, {"unix", abstract}} {
		if got := attack(t, spec, "connect", c[0], c[1])["connect "+c[0]+" "+c[1]]; got.Err != "" {
			t.Errorf("control: host network cannot reach %s: %+v", c[1], got)
		}
	}
}

func TestEscapeKernelInterfaces(t *testing.T) {
	spec := baseSpec(t)
	p := attack(t, spec, "mount")
	for _, name := range []string{"mount tmpfs", "umount /proc", "remount / rw", "mount cgroup2", "mount proc", "fsopen", "open_tree"} {
		want(t, p, name, "EPERM")
	}
	want(t, attack(t, spec, "mknod"), "mknod", "EPERM")
	p = attack(t, spec, "keyctl")
	want(t, p, "keyctl", "EPERM")
	want(t, p, "add_key", "EPERM")
	want(t, attack(t, spec, "bpf"), "bpf", "EPERM")
	want(t, attack(t, spec, "perf"), "perf_event_open", "EPERM")
	want(t, attack(t, spec, "userfaultfd"), "userfaultfd", "EPERM")
	want(t, attack(t, spec, "open_by_handle"), "open_by_handle_at", "EPERM")
	p = attack(t, spec, "userns")
	for _, name := range []string{"unshare user", "unshare mount", "unshare net", "clone newuser", "setns"} {
		want(t, p, name, "EPERM")
	}
	want(t, p, "clone3", "ENOSYS")
}

func TestEscapeDevices(t *testing.T) {
	spec := baseSpec(t)
	got := strings.Fields(attack(t, spec, "ls", "/dev")["ls /dev"].Out)
	slices.Sort(got)
	wantDev := []string{"fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout", "tty", "urandom", "zero"}
	if !slices.Equal(got, wantDev) {
		t.Errorf("/dev has %v, want %v", got, wantDev)
	}
	for _, d := range []string{"/dev/sda", "/dev/vda", "/dev/mem", "/dev/kmsg", "/dev/console"} {
		want(t, attack(t, spec, "stat", d), "stat "+d, "ENOENT")
	}
}

func TestEscapeTerminalInjection(t *testing.T) {
	spec := baseSpec(t)
	// With the host's terminal as stdin (no -t): a new session, no
	// controlling terminal, and TIOCSTI refused.
	master, slave := openPTY(t)
	defer master.Close()
	defer slave.Close()
	res, out, _ := run(t, spec, &sandbox.Cmd{Args: []string{attackerPath, "tiocsti"}, Stdin: slave})
	if res.ExitCode != 0 {
		t.Fatalf("attacker failed: %d", res.ExitCode)
	}
	p := parseProbes(t, out)
	want(t, p, "tiocsti stdin", "EPERM")
	want(t, p, "tiocsti stdin high bits", "EPERM")
	want(t, p, "tiocsti /dev/tty", "ENXIO")
	want(t, p, "tioclinux", "EPERM")
	// On its own terminal (-t) it still cannot push input.
	sb, err := native.New(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	proc, err := sb.Start(t.Context(), &sandbox.Cmd{Args: []string{attackerPath, "tiocsti"}, TTY: true})
	if err != nil {
		t.Fatal(err)
	}
	out = readAll(proc.PTY)
	if _, err := proc.Wait(); err != nil {
		t.Fatal(err)
	}
	p = parseProbes(t, strings.ReplaceAll(out, "\r", ""))
	want(t, p, "tiocsti stdin", "EPERM")
	want(t, p, "tiocsti /dev/tty", "EPERM")
}

func TestEscapePrivileges(t *testing.T) {
	spec := baseSpec(t)
	got := attack(t, spec, "caps")["caps"].Out
	for _, w := range []string{"CapInh: 0000000000000000", "CapPrm: 0000000000000000", "CapEff: 0000000000000000",
		"CapBnd: 0000000000000000", "CapAmb: 0000000000000000", "NoNewPrivs: 1", "Seccomp: 2"} {
		if !strings.Contains(got, w) {
			t.Errorf("missing %q in %s", w, got)
		}
	}
	// The sandbox's ids are never the host's root.
	if os.Geteuid() == 0 {
		res, out, _ := run(t, spec, &sandbox.Cmd{Args: []string{"cat", "/proc/self/uid_map"}})
		if res.ExitCode != 0 || strings.Fields(out)[1] == "0" {
			t.Errorf("uid 0 inside maps to host root: %q", out)
		}
	}
	// System directories are mounted nosuid: setuid bits grant nothing.
	_, out, _ := run(t, spec, &sandbox.Cmd{Args: []string{"cat", "/proc/self/mountinfo"}})
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 5 && (f[4] == "/usr" || f[4] == "/etc") && !strings.Contains(f[5], "nosuid") {
			t.Errorf("%s mounted without nosuid: %s", f[4], l)
		}
	}
	// A granted capability is there, and only it.
	spec.Capabilities = []string{"CAP_NET_RAW"}
	got = attack(t, spec, "caps")["caps"].Out
	if !strings.Contains(got, "CapEff: 0000000000002000") {
		t.Errorf("granted CAP_NET_RAW not effective: %s", got)
	}
}

func TestEscapeEnvironment(t *testing.T) {
	t.Setenv("PINFOLD_TEST_SECRET", "leaked")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "leaked")
	got := attack(t, baseSpec(t), "env")["env"].Out
	if strings.Contains(got, "leaked") {
		t.Errorf("host environment leaked into the sandbox: %s", got)
	}
	for _, v := range strings.Split(got, "\n") {
		name, _, _ := strings.Cut(v, "=")
		if !slices.Contains([]string{"PATH", "HOME", "HOSTNAME"}, name) {
			t.Errorf("unexpected variable %q", v)
		}
	}
}

func TestEscapeOrphansDie(t *testing.T) {
	spec := baseSpec(t)
	res, _, _ := run(t, spec, &sandbox.Cmd{Args: []string{"sh", "-c",
		`setsid sh -c 'sleep 1000; :' pinfold-native-test-marker & sh -c 'sleep 1000; :' pinfold-native-test-marker & exit 0`}})
	if res.ExitCode != 0 {
		t.Fatalf("status %d", res.ExitCode)
	}
	waitNoLeaks(t, time.Second)
}

func TestEscapeForkBomb(t *testing.T) {
	requireRoot(t)
	spec := baseSpec(t)
	spec.Limits.Pids = 40
	res, _, _ := run(t, spec, &sandbox.Cmd{Args: []string{"sh", "-c",
		`i=0; while [ $i -lt 300 ]; do (sleep 3; :) 2>/dev/null & i=$((i+1)); done; wait`}, Timeout: 30 * time.Second})
	if !slices.Contains(res.LimitsHit, sandbox.LimitPids) {
		t.Errorf("pids limit not reported: %+v", res)
	}
	if err := exec.Command("true").Run(); err != nil {
		t.Fatalf("the host cannot fork after the bomb: %v", err)
	}
}

func TestEscapeMemoryBomb(t *testing.T) {
	requireRoot(t)
	spec := baseSpec(t)
	spec.Limits.Memory = 64 << 20
	res, _, _ := run(t, spec, &sandbox.Cmd{Args: []string{attackerPath, "alloc", "1024"}, Timeout: 60 * time.Second})
	if res.Reason != sandbox.ReasonOOM || res.ExitCode != 137 || !slices.Contains(res.LimitsHit, sandbox.LimitMemory) {
		t.Errorf("memory limit not enforced or not reported: %+v", res)
	}
}

func TestEscapeDiskBomb(t *testing.T) {
	spec := baseSpec(t)
	spec.Limits.TmpSize = 8 << 20
	res, _, errs := run(t, spec, &sandbox.Cmd{Args: []string{"sh", "-c", "head -c 100000000 /dev/zero > /tmp/fill"}})
	if res.ExitCode == 0 || !slices.Contains(res.LimitsHit, sandbox.LimitTmp) {
		t.Errorf("tmp limit not enforced or not reported: %+v %s", res, errs)
	}
	if !strings.Contains(errs, "No space left") {
		t.Errorf("the command did not see ENOSPC: %s", errs)
	}
}

func parseProbes(t *testing.T, out string) map[string]probe {
	t.Helper()
	p := map[string]probe{}
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var pr probe
		if err := jsonUnmarshal(l, &pr); err != nil {
			t.Fatalf("bad probe line %q: %v", l, err)
		}
		p[pr.Probe] = pr
	}
	return p
}

// openPTY opens a pseudo-terminal pair on the host.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}
