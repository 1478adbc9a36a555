package doctor

import (
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/pinfold/pinfold/internal/cgroup"
	"golang.org/x/sys/unix"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

// fakeProc is a /proc tree with the files the checks read.
type fakeProc struct {
	root, sys, proc string
}

func newFakeProc(t testing.TB, files map[string]string) *fakeProc {
	t.Helper()
	root := t.TempDir()
	f := &fakeProc{root: root, sys: root + "/proc/sys", proc: root + "/proc"}
	base := map[string]string{
		"sys/user/max_user_namespaces":     "15000\n",
		"sys/kernel/seccomp/actions_avail": "kill_process kill_thread trap errno user_notif trace log allow\n",
		"sys/kernel/random/boot_id":        "11111111-2222-3333-4444-555555555555\n",
		"self/status":                      "Name:\tx\nSeccomp:\t0\nSeccomp_filters:\t0\n",
		"self/ns/user":                     "",
		"self/cgroup":                      "0::/user.slice/a.scope\n",
		"filesystems":                      "nodev\ttmpfs\nnodev\toverlay\n",
		"cgroups":                          "#subsys_name\thierarchy\tnum_cgroups\tenabled\ncpu\t3\t1\t1\nmemory\t4\t1\t1\npids\t5\t1\t1\n",
	}
	for k, v := range files {
		base[k] = v
	}
	for k, v := range base {
		if v == "<absent>" {
			continue
		}
		p := filepath.Join(f.proc, k)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *fakeProc) read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.proc, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fakeHost is a host that looks at f and whose probes fail with the
// given errors (nil: succeed).
func fakeHost(f *fakeProc, euid int, userns, unpriv, overlay error) *host {
	h := newHost()
	h.ProcSys, h.Proc, h.EUID = f.sys, f.proc, euid
	h.ProbeUserns = func(context.Context) error { return userns }
	h.probeUnpriv = func(context.Context) (bool, error) { return true, unpriv }
	h.probeOverlay = func(context.Context) (bool, error) { return true, overlay }
	h.probeIDMap = func(context.Context, string) error { return nil }
	h.RunDir = func(int) string { return "" }
	return h
}

func byID(t *testing.T, r *Report, id string) Check {
	t.Helper()
	for _, c := range r.Checks {
		if c.ID == id {
			return c
		}
	}
	t.Fatalf("no check %q in %+v", id, r.Checks)
	return Check{}
}

// TestHostPasses runs the real checks on this machine, which can run
// sandboxes: as root, with a fresh store.
func TestHostPasses(t *testing.T) {
	requireRoot(t)
	r := Run(context.Background(), Options{StoreDir: t.TempDir(), Workspace: t.TempDir()})
	for _, id := range []string{"userns", "userns.unprivileged", "overlay.userns", "seccomp", "cgroup.version",
		"cgroup.controllers", "cgroup.delegation", "store.writable", "store.space", "bases", "idmap.workspace"} {
		if c := byID(t, r, id); c.Status != Pass {
			t.Errorf("%s: %s: %s (fix: %s)", id, c.Status, c.Detail, c.Fix)
		}
	}
	// squashfuse and squashfs-tools are installed by scripts/test-setup.sh.
	if _, err := exec.LookPath("squashfuse_ll"); err == nil || os.Getenv("CI") != "" {
		if c := byID(t, r, "app.mount"); c.Status != Pass || !strings.Contains(c.Detail, "apps are mounted") {
			t.Errorf("app.mount: %s: %s (fix: %s)", c.Status, c.Detail, c.Fix)
		}
	}
	if r.Failed() {
		t.Errorf("report failed: %+v", r.Checks)
	}
	for _, c := range r.Checks {
		if c.ID == "podman" || c.ID == "docker" {
			t.Errorf("slow check %s ran without Options.Slow", c.ID)
		}
		if c.Title == "" || c.Detail == "" || c.Status != Pass && c.Fix == "" && c.ID != "landlock" {
			t.Errorf("check %+v lacks a title, detail or fix", c)
		}
	}
	if r.UID != 0 || r.Kernel == "" {
		t.Errorf("report header %d %q", r.UID, r.Kernel)
	}
}

func TestReportJSON(t *testing.T) {
	f := newFakeProc(t, nil)
	r := Run(context.Background(), Options{StoreDir: t.TempDir(), host: fakeHost(f, 0, nil, nil, nil)})
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Kernel string
		UID    int
		Checks []map[string]any
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Checks) != len(r.Checks) {
		t.Fatalf("%s", b)
	}
	for _, c := range back.Checks {
		for _, k := range []string{"id", "title", "status", "detail", "fixable"} {
			if _, ok := c[k]; !ok {
				t.Errorf("check %v has no %q field", c, k)
			}
		}
	}
}

// TestForcedFailures imitates a host that forbids user namespaces and
// lacks seccomp errno, and checks the texts and the fixes, which Apply
// writes into the fake /proc/sys.
func TestForcedFailures(t *testing.T) {
	f := newFakeProc(t, map[string]string{
		"sys/user/max_user_namespaces":                     "0\n",
		"sys/kernel/unprivileged_userns_clone":             "0\n",
		"sys/kernel/apparmor_restrict_unprivileged_userns": "1\n",
		"sys/kernel/seccomp/actions_avail":                 "kill_process allow\n",
	})
	h := fakeHost(f, 0, syscall.EPERM, errors.New("unshare: write failed /proc/self/uid_map: Operation not permitted"), errors.New("mount: permission denied"))
	r := Run(context.Background(), Options{StoreDir: t.TempDir(), host: h})
	if !r.Failed() {
		t.Error("report did not fail")
	}
	for _, c := range []struct {
		id      string
		status  Status
		detail  []string
		fix     []string
		fixable bool
	}{
		{"userns", Fail, []string{"operation not permitted", "user.max_user_namespaces is 0"},
			[]string{"sysctl -w user.max_user_namespaces=15000", "/etc/sysctl.d/"}, true},
		{"userns.unprivileged", Warn, []string{"uid 65534", "uid_map", "kernel.unprivileged_userns_clone is 0", "AppArmor", "pinfold works as root"},
			[]string{"sysctl -w user.max_user_namespaces=15000", "sysctl -w kernel.unprivileged_userns_clone=1",
				"sysctl -w kernel.apparmor_restrict_unprivileged_userns=0", "AppArmor profile"}, true},
		{"overlay.userns", Warn, []string{"mount: permission denied", "does not need overlays yet"}, []string{"kernel refused"}, false},
		{"seccomp", Fail, []string{"lack errno"}, []string{"SECCOMP_RET_ERRNO"}, false},
	} {
		got := byID(t, r, c.id)
		if got.Status != c.status || got.Fixable != c.fixable {
			t.Errorf("%s: %s fixable=%v, want %s %v (%s)", c.id, got.Status, got.Fixable, c.status, c.fixable, got.Detail)
		}
		for _, s := range c.detail {
			if !strings.Contains(got.Detail, s) {
				t.Errorf("%s: detail %q lacks %q", c.id, got.Detail, s)
			}
		}
		for _, s := range c.fix {
			if !strings.Contains(got.Fix, s) {
				t.Errorf("%s: fix %q lacks %q", c.id, got.Fix, s)
			}
		}
	}

	msg, err := Apply(context.Background(), byID(t, r, "userns"))
	if err != nil || !strings.Contains(msg, "set user.max_user_namespaces = 15000") || !strings.Contains(msg, "/etc/sysctl.d/60-pinfold.conf") {
		t.Errorf("Apply(userns): %q %v", msg, err)
	}
	if got := f.read(t, "sys/user/max_user_namespaces"); got != "15000\n" {
		t.Errorf("max_user_namespaces = %q", got)
	}
	if got := f.read(t, "sys/kernel/unprivileged_userns_clone"); got != "0\n" {
		t.Errorf("root's fix touched unprivileged_userns_clone: %q", got)
	}
	if _, err := Apply(context.Background(), byID(t, r, "userns.unprivileged")); err != nil {
		t.Fatal(err)
	}
	if a, b := f.read(t, "sys/kernel/unprivileged_userns_clone"), f.read(t, "sys/kernel/apparmor_restrict_unprivileged_userns"); a != "1\n" || b != "0\n" {
		t.Errorf("after Apply: clone %q apparmor %q", a, b)
	}
	if _, err := os.Stat(filepath.Join(f.root, "etc")); err == nil {
		t.Error("Apply wrote an etc directory")
	}
	// Fixed now: nothing left to change.
	msg, err = Apply(context.Background(), byID(t, r, "userns.unprivileged"))
	if err != nil || !strings.Contains(msg, "nothing to change") {
		t.Errorf("second Apply: %q %v", msg, err)
	}
	if _, err := Apply(context.Background(), byID(t, r, "seccomp")); err == nil {
		t.Error("Apply of an unfixable check succeeded")
	}
}

// TestForcedFailuresOrdinaryUser: the same host seen by uid 1000, which
// needs all three sysctls and cannot apply them.
func TestForcedFailuresOrdinaryUser(t *testing.T) {
	f := newFakeProc(t, map[string]string{
		"sys/kernel/unprivileged_userns_clone": "0\n",
	})
	h := fakeHost(f, 1000, syscall.EPERM, nil, nil)
	r := Run(context.Background(), Options{StoreDir: t.TempDir(), host: h})
	c := byID(t, r, "userns")
	if c.Status != Fail || c.Fixable || !strings.HasPrefix(c.Fix, "as root: sysctl -w kernel.unprivileged_userns_clone=1") ||
		strings.Contains(c.Fix, "max_user_namespaces") {
		t.Errorf("userns: %+v", c)
	}
	u := byID(t, r, "userns.unprivileged")
	if u.Status != Fail || !strings.Contains(u.Detail, "uid 1000") || u.Fix != c.Fix {
		t.Errorf("userns.unprivileged: %+v", u)
	}
	c.Fixable = true // even when asked, an ordinary user cannot write sysctls
	if _, err := Apply(context.Background(), c); err == nil || !strings.Contains(err.Error(), "needs root") {
		t.Errorf("Apply as uid 1000: %v", err)
	}
	if got := f.read(t, "sys/kernel/unprivileged_userns_clone"); got != "0\n" {
		t.Errorf("sysctl changed: %q", got)
	}
	// A store of the test's user is not uid 1000's.
	if s := byID(t, r, "store.writable"); os.Geteuid() != 1000 && (s.Status != Fail || !strings.Contains(s.Detail, "belongs to uid "+strconv.Itoa(os.Geteuid()))) {
		t.Errorf("store.writable: %+v", s)
	}
}

func TestUsernsBlockedElsewhere(t *testing.T) {
	f := newFakeProc(t, nil)
	h := fakeHost(f, 0, syscall.EPERM, nil, nil)
	c := fromPreflight(h.UsernsCheck(context.Background()))
	if c.Status != Fail || c.Fixable || !strings.Contains(c.Fix, "seccomp profile") {
		t.Errorf("%+v", c)
	}
	os.Remove(filepath.Join(f.proc, "self/ns/user"))
	if c := fromPreflight(h.UsernsCheck(context.Background())); !strings.Contains(c.Fix, "CONFIG_USER_NS") {
		t.Errorf("no userns in kernel: %+v", c)
	}
	// The limit is reached rather than zero.
	f = newFakeProc(t, map[string]string{"sys/user/max_user_namespaces": "10\n"})
	h = fakeHost(f, 0, syscall.ENOSPC, nil, nil)
	if c := fromPreflight(h.UsernsCheck(context.Background())); !c.Fixable || !strings.Contains(c.Detail, "that many user namespaces exist") {
		t.Errorf("ENOSPC: %+v", c)
	}
}

func TestSeccompTexts(t *testing.T) {
	for _, c := range []struct {
		name   string
		files  map[string]string
		status Status
		want   string
	}{
		{"ok", nil, Pass, "errno available"},
		{"under a filter", map[string]string{"self/status": "Seccomp:\t2\n"}, Pass, "stacks"},
		{"strict", map[string]string{"self/status": "Seccomp:\t1\n"}, Fail, "strict"},
		{"no seccomp", map[string]string{"self/status": "Name:\tx\n"}, Fail, "no seccomp"},
		{"no filters", map[string]string{"sys/kernel/seccomp/actions_avail": "<absent>"}, Fail, "no seccomp filters"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := fakeHost(newFakeProc(t, c.files), 0, nil, nil, nil)
			got := h.seccompCheck()
			if got.Status != c.status || !strings.Contains(got.Detail, c.want) || got.Status != Pass && got.Fix == "" {
				t.Errorf("%+v", got)
			}
		})
	}
}

func TestOverlayNotTried(t *testing.T) {
	f := newFakeProc(t, map[string]string{"filesystems": "nodev\ttmpfs\n"})
	h := fakeHost(f, 0, nil, nil, nil)
	h.probeOverlay = func(context.Context) (bool, error) { return false, nil }
	c := h.overlayCheck(context.Background())
	if c.Status != Warn || !strings.Contains(c.Fix, "modprobe overlay") {
		t.Errorf("%+v", c)
	}
}

func TestStoreChecks(t *testing.T) {
	f := newFakeProc(t, nil)
	h := fakeHost(f, os.Geteuid(), nil, nil, nil)
	tmp := t.TempDir()

	missing := filepath.Join(tmp, "a", "store")
	w := h.storeChecks(missing)[0]
	if w.Status != Warn || !w.Fixable || !strings.Contains(w.Detail, "does not exist yet") {
		t.Fatalf("missing store: %+v", w)
	}
	w.host = h
	msg, err := Apply(context.Background(), w)
	if err != nil || !strings.Contains(msg, "created "+missing) {
		t.Fatalf("Apply: %q %v", msg, err)
	}
	if st, err := os.Stat(missing); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("created store: %v %v", st.Mode(), err)
	}
	if cs := h.storeChecks(missing); cs[0].Status != Pass || cs[1].Status == Fail {
		t.Errorf("after fix: %+v", cs)
	}

	os.Chmod(missing, 0o777)
	w = h.storeChecks(missing)[0]
	if w.Status != Fail || !w.Fixable || !strings.Contains(w.Fix, "chmod go-w") {
		t.Fatalf("open store: %+v", w)
	}
	if _, err := Apply(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(missing); st.Mode().Perm() != 0o755 {
		t.Errorf("after chmod fix: %v", st.Mode())
	}

	file := filepath.Join(tmp, "file")
	os.WriteFile(file, nil, 0o600)
	if w := h.storeChecks(file)[0]; w.Status != Fail || w.Fixable || !strings.Contains(w.Detail, "not a directory") {
		t.Errorf("file store: %+v", w)
	}
	if w := h.storeChecks(filepath.Join(file, "store"))[0]; w.Status != Fail || w.Fixable {
		t.Errorf("store under a file: %+v", w)
	}
	if os.Geteuid() == 0 {
		// Play an ordinary user: a parent it cannot write.
		h.EUID = 65534
		ro := filepath.Join(tmp, "ro")
		os.Mkdir(ro, 0o755)
		defer func() { h.EUID = os.Geteuid() }()
		if w := h.storeChecks(filepath.Join(ro, "store"))[0]; w.Status == Pass {
			t.Errorf("unwritable parent: %+v", w)
		}
	}
}

func TestBasesCountsTarBases(t *testing.T) {
	dir := t.TempDir()
	for _, h := range []string{"aa", "bb"} {
		os.MkdirAll(filepath.Join(dir, "bases", "tar", h), 0o700)
		os.WriteFile(filepath.Join(dir, "bases", "tar", h, "manifest.json"), []byte("{}"), 0o600)
	}
	c := newHost().basesCheck(dir)
	if c.Status != Pass || !strings.Contains(c.Detail, "2 tar bases") || !strings.Contains(c.Detail, "/usr") {
		t.Errorf("%+v", c)
	}
}

func TestIDMapUnsupported(t *testing.T) {
	requireRoot(t)
	h := newHost()
	if c := h.idmapCheck(context.Background(), "/proc"); c.Status != Fail || !strings.Contains(c.Detail, "PF141") {
		t.Errorf("/proc: %+v", c)
	}
	if c := h.idmapCheck(context.Background(), t.TempDir()); c.Status != Pass {
		t.Errorf("temp dir: %+v", c)
	}
	if c := h.idmapCheck(context.Background(), "/no/such/dir"); c.Status != Warn {
		t.Errorf("missing dir: %+v", c)
	}
	h.EUID = 1000
	if c := h.idmapCheck(context.Background(), "/proc"); c.Status != Pass {
		t.Errorf("ordinary user: %+v", c)
	}
}

func TestCgroupChecksWithoutCgroups(t *testing.T) {
	h := fakeHost(newFakeProc(t, nil), 0, nil, nil, nil)
	h.Cgroups = cgroupsMissing
	cs := h.cgroupChecks()
	if cs[0].Status != Warn || cs[1].Status != Fail || cs[1].Fix == "" {
		t.Errorf("%+v", cs)
	}
}

// fakeDocker serves one canned answer per connection on a unix socket.
func fakeDocker(t *testing.T, answer string) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 1024)
			n, _ := c.Read(buf)
			if strings.HasPrefix(string(buf[:n]), "GET /_ping HTTP/1.1\r\n") {
				c.Write([]byte(answer))
			}
			c.Close()
		}
	}()
	return sock
}

func TestDockerPing(t *testing.T) {
	ok := fakeDocker(t, "HTTP/1.1 200 OK\r\nApi-Version: 1.45\r\nContent-Length: 2\r\n\r\nOK")
	if line, err := pingDocker(ok, 2e9); err != nil || line != "HTTP/1.1 200 OK" {
		t.Errorf("ok: %q %v", line, err)
	}
	bad := fakeDocker(t, "HTTP/1.1 500 Internal Server Error\r\n\r\n")
	if _, err := pingDocker(bad, 2e9); err == nil || !strings.Contains(err.Error(), "500") {
		t.Errorf("500: %v", err)
	}
	if _, err := pingDocker(filepath.Join(t.TempDir(), "none.sock"), 2e9); !errors.Is(err, unix.ENOENT) {
		t.Errorf("no socket: %v", err)
	}

	var r Check
	t.Setenv("DOCKER_HOST", "unix://"+ok)
	dockerReachable(context.Background(), "docker", &r)
	if r.Status != Pass || !strings.Contains(r.Detail, ok) {
		t.Errorf("reachable: %+v", r)
	}
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "none.sock"))
	r = Check{}
	dockerReachable(context.Background(), "docker", &r)
	// How to start it depends on whether systemd runs here.
	if r.Status != Warn || !strings.Contains(r.Fix, "systemctl start docker") && !strings.Contains(r.Fix, "dockerd >/var/log/dockerd.log") {
		t.Errorf("unreachable: %+v", r)
	}
}

func TestSlowChecks(t *testing.T) {
	f := newFakeProc(t, nil)
	t.Setenv("PATH", t.TempDir()) // neither podman nor docker
	r := Run(context.Background(), Options{Slow: true, StoreDir: t.TempDir(), host: fakeHost(f, 0, nil, nil, nil)})
	for _, id := range []string{"podman", "docker"} {
		if c := byID(t, r, id); c.Status != Warn || !strings.Contains(c.Detail, "not installed") {
			t.Errorf("%s: %+v", id, c)
		}
	}
}

func TestKernelAtLeast(t *testing.T) {
	for _, c := range []struct {
		rel    string
		at, ok bool
	}{
		{"6.18.44-fc-v769", true, true},
		{"5.11.0", true, true},
		{"5.10.200-lts", false, true},
		{"4.19", false, true},
		{"6.1-rc1", true, true},
		{"junk", false, false},
	} {
		if at, ok := kernelAtLeast(c.rel, 5, 11); at != c.at || ok != c.ok {
			t.Errorf("%s: %v %v", c.rel, at, ok)
		}
	}
}

func cgroupsMissing() (*cgroup.System, error) {
	return nil, fmt.Errorf("detecting cgroups: %w", cgroup.ErrUnsupported)
}

// TestModVersion: modVersion reads what debug/buildinfo reads, from this
// test's own executable and from runsc where it is installed, and nothing
// from a program that is not Go's.
func TestModVersion(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	paths := []string{exe}
	if p, err := exec.LookPath("runsc"); err == nil {
		paths = append(paths, p)
	}
	for _, p := range paths {
		bi, err := buildinfo.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := modVersion(p); got != bi.Main.Version || p == exe && got == "" {
			t.Errorf("modVersion(%s) = %q, debug/buildinfo says %q", p, got, bi.Main.Version)
		}
	}
	if v := modVersion("/bin/sh"); v != "" {
		t.Errorf("modVersion(/bin/sh) = %q", v)
	}
}
