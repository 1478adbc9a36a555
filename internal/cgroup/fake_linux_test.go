package cgroup

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseMountinfo(t *testing.T) {
	tests := []struct {
		file       string
		v1         [numCtrl]string // memory, pids, cpu
		v2, v2Root string
	}{
		{
			// This machine: every controller on its own v1 mount, cpu
			// apart from cpuacct, and a cgroup2 tree without them.
			file: "mountinfo-hybrid-host",
			v1:   [numCtrl]string{"/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/cpu"},
			v2:   "/sys/fs/cgroup/unified", v2Root: "/",
		},
		{
			// systemd hybrid: cpu mounted with cpuacct, no pids hierarchy.
			file: "mountinfo-hybrid-systemd",
			v1:   [numCtrl]string{"/sys/fs/cgroup/memory", "", "/sys/fs/cgroup/cpu,cpuacct"},
			v2:   "/sys/fs/cgroup/unified", v2Root: "/",
		},
		{
			file: "mountinfo-v2",
			v2:   "/sys/fs/cgroup", v2Root: "/",
		},
		{
			// A container: the cgroup2 mount at /sys/fs/cgroup is covered
			// by a tmpfs, the visible one has a space in its path and a
			// root below the hierarchy's; memory and pids share a mount.
			file: "mountinfo-container-v2",
			v1:   [numCtrl]string{"/mnt/mem", "/mnt/mem", ""},
			v2:   "/mnt/cg v2", v2Root: "/docker/4f1c",
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			got := parseMountinfo(string(data))
			want := cgroupMounts{v1: tt.v1, v2: tt.v2, v2Root: tt.v2Root}
			if got != want {
				t.Errorf("parseMountinfo() = %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestParseMountLineMalformed(t *testing.T) {
	for _, line := range []string{"", "1 2 3", "30 22 0:26 / /sys/fs/cgroup rw shared:9 cgroup2 cgroup2 rw"} {
		if m, ok := parseMountLine(line); ok {
			t.Errorf("parseMountLine(%q) = %+v, true; want false", line, m)
		}
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/plain`:          "/plain",
		`/a\040b`:         "/a b",
		`/t\011\012\134x`: "/t\t\n\\x",
		`/short\04`:       `/short\04`,
		`/not\08x`:        `/not\08x`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestKeyValue(t *testing.T) {
	oom := []byte("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
	if v, ok := keyValue(oom, "oom_kill"); !ok || v != 3 {
		t.Errorf("keyValue(oom_control, oom_kill) = %d, %v; want 3, true", v, ok)
	}
	if _, ok := keyValue([]byte("maximum 4\n"), "max"); ok {
		t.Error("keyValue matched a longer key")
	}
	if v, ok := keyValue([]byte("max 7"), "max"); !ok || v != 7 {
		t.Errorf("keyValue without newline = %d, %v; want 7, true", v, ok)
	}
	var pids []int
	eachPid([]byte("12\n345\n6"), func(p int) { pids = append(pids, p) })
	if !slices.Equal(pids, []int{12, 345, 6}) {
		t.Errorf("eachPid = %v", pids)
	}
	if hasPids([]byte("")) || hasPids([]byte("\n")) || !hasPids([]byte("1\n")) {
		t.Error("hasPids wrong")
	}
}

// fakeFS imitates cgroupfs inside a temporary directory: mkdir creates
// the interface files the kernel would, given the parent's
// cgroup.subtree_control, and rmdir refuses groups that have children.
// Unlike the kernel it does not add files to existing groups when a
// controller is enabled later.
type fakeFS struct {
	t    *testing.T
	root string // temporary directory standing for "/"
	v2   string // cgroup2 mount point inside root, or ""
}

var (
	v1Files = []string{"cgroup.procs", "memory.limit_in_bytes", "memory.memsw.limit_in_bytes",
		"memory.oom_control", "memory.max_usage_in_bytes", "pids.max", "pids.events",
		"cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.stat"}
	v2Files = map[string][]string{
		"":       {"cgroup.procs", "cgroup.controllers", "cgroup.subtree_control", "cgroup.type", "cgroup.kill", "cgroup.events"},
		"memory": {"memory.max", "memory.swap.max", "memory.events", "memory.peak"},
		"pids":   {"pids.max", "pids.events"},
		"cpu":    {"cpu.max", "cpu.stat"},
	}
)

func (f *fakeFS) mkdir(dir string) error {
	if err := unix.Mkdir(dir, 0o755); err != nil {
		return err
	}
	files := v1Files
	if f.v2 != "" && strings.HasPrefix(dir, f.v2+"/") {
		b, err := os.ReadFile(filepath.Dir(dir) + "/cgroup.subtree_control")
		if err != nil {
			f.t.Errorf("fake mkdir %s: %v", dir, err)
		}
		files = v2Files[""]
		var enabled []string
		for _, c := range strings.Fields(string(b)) {
			c = strings.TrimPrefix(c, "+")
			enabled = append(enabled, c)
			files = append(files, v2Files[c]...)
		}
		defer f.write(dir+"/cgroup.controllers", strings.Join(enabled, " "))
	}
	for _, name := range files {
		f.write(dir+"/"+name, "")
	}
	return nil
}

func (f *fakeFS) rmdir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err.(*fs.PathError).Err
	}
	for _, e := range entries {
		if e.IsDir() {
			return unix.EBUSY
		}
	}
	return os.RemoveAll(dir)
}

func (f *fakeFS) write(path, content string) {
	f.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeFS) read(path string) string {
	f.t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		f.t.Fatal(err)
	}
	return string(b)
}

// newFake makes a fake host from a testdata mountinfo file. Mount points
// are made under the returned fakeFS's root; v2ctrl is written to the
// cgroup2 root's cgroup.controllers. selfCgroup is the "0::" path of the
// test's own cgroup. denied lists paths the fake user may not write.
func newFake(t *testing.T, mountinfo, v2ctrl, selfCgroup string, denied ...string) (*fakeFS, config) {
	f := &fakeFS{t: t, root: t.TempDir()}
	data, err := os.ReadFile(filepath.Join("testdata", mountinfo))
	if err != nil {
		t.Fatal(err)
	}
	m := parseMountinfo(string(data))
	for _, p := range m.v1 {
		if p != "" {
			f.write(f.root+p+"/cgroup.procs", "")
		}
	}
	if m.v2 != "" {
		f.v2 = f.root + m.v2
		f.write(f.v2+"/cgroup.controllers", v2ctrl)
		f.write(f.v2+"/cgroup.subtree_control", "")
		f.write(f.v2+"/cgroup.procs", "1\n")
	}
	f.write(f.root+"/proc/self/cgroup", "0::"+selfCgroup+"\n")
	cfg := config{
		prefix:     f.root,
		mountinfo:  filepath.Join("testdata", mountinfo),
		selfCgroup: f.root + "/proc/self/cgroup",
		mkdir:      f.mkdir,
		rmdir:      f.rmdir,
		writable: func(path string) error {
			for _, d := range denied {
				if path == f.root+d {
					return unix.EACCES
				}
			}
			return access(path, unix.W_OK)
		},
	}
	return f, cfg
}

func TestDetectFake(t *testing.T) {
	tests := []struct {
		name, mountinfo, v2ctrl string
		version                 string
		onV2                    ctrlSet
	}{
		// All three on v1: cgroup.controllers of the unified tree is not
		// read (the fake has it empty anyway).
		{"hybrid-host", "mountinfo-hybrid-host", "", "v1", 0},
		{"hybrid-systemd-pids-on-v2", "mountinfo-hybrid-systemd", "pids rdma", "hybrid", 1 << ctrlPids},
		{"hybrid-systemd-pids-nowhere", "mountinfo-hybrid-systemd", "", "v1", 0},
		{"v2", "mountinfo-v2", "cpuset cpu io memory hugetlb pids rdma misc", "v2", 1<<ctrlMemory | 1<<ctrlPids | 1<<ctrlCPU},
		{"v2-no-controllers", "mountinfo-v2", "", "none", 0},
		{"container-v2", "mountinfo-container-v2", "cpu io memory pids", "hybrid", 1 << ctrlCPU},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, cfg := newFake(t, tt.mountinfo, tt.v2ctrl, "/")
			s, err := detect(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Version(); got != tt.version {
				t.Errorf("Version() = %q, want %q", got, tt.version)
			}
			var onV2 ctrlSet
			for c := range numCtrl {
				if s.onV2(c) {
					onV2 |= 1 << c
				}
			}
			if onV2 != tt.onV2 {
				t.Errorf("controllers on v2 = %q, want %q", onV2, tt.onV2)
			}
		})
	}
}

// TestDetectSkipsV2ControllersWhenV1Complete checks that Detect does not
// read the cgroup2 root's cgroup.controllers when v1 has every
// controller: the fake has no such file, so reading it would fail.
func TestDetectSkipsV2ControllersWhenV1Complete(t *testing.T) {
	f, cfg := newFake(t, "mountinfo-hybrid-host", "", "/")
	if err := os.Remove(f.v2 + "/cgroup.controllers"); err != nil {
		t.Fatal(err)
	}
	if _, err := detect(cfg); err != nil {
		t.Fatalf("detect() = %v", err)
	}
	f2, cfg2 := newFake(t, "mountinfo-v2", "", "/")
	if err := os.Remove(f2.v2 + "/cgroup.controllers"); err != nil {
		t.Fatal(err)
	}
	if _, err := detect(cfg2); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("detect() on v2 without cgroup.controllers = %v, want not-exist", err)
	}
}

const userScope = "/user.slice/user-1000.slice/user@1000.service/app.slice/run-u7.scope"

func TestSupportsFake(t *testing.T) {
	all := Limits{MemoryBytes: 32 << 20, Pids: 16, CPUs: 0.5}
	tests := []struct {
		name, mountinfo, v2ctrl, self string
		denied                        []string
		setup                         func(f *fakeFS)
		l                             Limits
		wantErr                       []string // substrings; none for nil
		wantBase                      string   // for v2, under the fake root
	}{
		{
			name: "v1-root", mountinfo: "mountinfo-hybrid-host", l: all,
		},
		{
			name: "v1-not-writable", mountinfo: "mountinfo-hybrid-host", l: all,
			denied:  []string{"/sys/fs/cgroup/pids"},
			wantErr: []string{"pids controller", "/sys/fs/cgroup/pids", "run pinfold as root"},
		},
		{
			name: "v1-limit-unused", mountinfo: "mountinfo-hybrid-host", l: Limits{MemoryBytes: 8 << 20},
			denied: []string{"/sys/fs/cgroup/pids"},
		},
		{
			name: "invalid", mountinfo: "mountinfo-hybrid-host", l: Limits{MemoryBytes: 1024},
			wantErr: []string{"4 MiB"},
		},
		{
			name: "hybrid-pids-missing", mountinfo: "mountinfo-hybrid-systemd", l: all,
			wantErr: []string{"pids controller", "does not list it in cgroup.controllers"},
		},
		{
			name: "hybrid-pids-on-v2", mountinfo: "mountinfo-hybrid-systemd", v2ctrl: "pids", l: all,
			wantBase: "/sys/fs/cgroup/unified",
		},
		{
			name: "v2-root", mountinfo: "mountinfo-v2", v2ctrl: "cpu memory pids", l: all,
			wantBase: "/sys/fs/cgroup",
		},
		{
			name: "v2-memory-missing", mountinfo: "mountinfo-v2", v2ctrl: "cpu pids", l: all,
			wantErr: []string{"memory controller", "cgroup.controllers"},
		},
		{
			name: "v2-unprivileged-undelegated", mountinfo: "mountinfo-v2", v2ctrl: "cpu memory pids", l: all,
			self:    "/user.slice/user-1000.slice/session-2.scope",
			denied:  []string{"/sys/fs/cgroup", "/sys/fs/cgroup/user.slice/user-1000.slice"},
			wantErr: []string{"cannot write the cgroup2 root", "not delegated", "run pinfold as root"},
		},
		{
			name: "v2-unprivileged-in-root", mountinfo: "mountinfo-v2", v2ctrl: "cpu memory pids", l: all,
			self:    "/",
			denied:  []string{"/sys/fs/cgroup"},
			wantErr: []string{"this process is in that root"},
		},
		{
			name: "v2-delegated", mountinfo: "mountinfo-v2", v2ctrl: "cpu memory pids", l: all,
			self: userScope, denied: []string{"/sys/fs/cgroup"},
			setup: func(f *fakeFS) {
				d := f.v2 + "/user.slice/user-1000.slice/user@1000.service/app.slice"
				f.write(d+"/cgroup.controllers", "cpu memory pids")
				f.write(d+"/cgroup.subtree_control", "cpu memory pids")
				f.write(d+"/cgroup.procs", "")
				f.write(d+"/cgroup.type", "domain")
			},
			wantBase: "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice",
		},
		{
			name: "v2-delegated-without-cpu", mountinfo: "mountinfo-v2", v2ctrl: "cpu memory pids", l: all,
			self: userScope, denied: []string{"/sys/fs/cgroup"},
			setup: func(f *fakeFS) {
				d := f.v2 + "/user.slice/user-1000.slice/user@1000.service/app.slice"
				f.write(d+"/cgroup.controllers", "memory pids")
				f.write(d+"/cgroup.subtree_control", "memory pids")
				f.write(d+"/cgroup.procs", "")
				f.write(d+"/cgroup.type", "domain")
			},
			wantErr: []string{"does not offer the cpu controller", "Delegate=cpu"},
		},
		{
			// A container's cgroup namespace: the mount root is not the
			// hierarchy's root and holds the container's processes.
			name: "v2-namespace-root-with-processes", mountinfo: "mountinfo-v2", v2ctrl: "cpu memory pids", l: all,
			setup: func(f *fakeFS) {
				f.write(f.v2+"/cgroup.type", "domain")
			},
			wantErr: []string{"has processes of its own", "leaf cgroup"},
		},
		{
			name: "v2-namespace-root-enabled", mountinfo: "mountinfo-v2", v2ctrl: "cpu memory pids", l: all,
			setup: func(f *fakeFS) {
				f.write(f.v2+"/cgroup.type", "domain")
				f.write(f.v2+"/cgroup.subtree_control", "cpu memory pids")
				f.write(f.v2+"/cgroup.procs", "")
				f.write(f.v2+"/pinfold/cgroup.subtree_control", "memory")
				f.write(f.v2+"/pinfold/cgroup.type", "domain")
				f.write(f.v2+"/pinfold/cgroup.procs", "77\n")
			},
			wantErr: []string{"pinfold/cgroup.subtree_control", "pids cpu", "processes of its own"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			self := tt.self
			if self == "" {
				self = "/"
			}
			f, cfg := newFake(t, tt.mountinfo, tt.v2ctrl, self, tt.denied...)
			if tt.setup != nil {
				tt.setup(f)
			}
			s, err := detect(cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = s.Supports(tt.l)
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Supports() = %v, want nil", err)
				}
			} else {
				if err == nil {
					t.Fatalf("Supports() = nil, want error containing %q", tt.wantErr)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("Supports() = %v, want it to contain %q", err, w)
					}
				}
				if !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrInvalid) {
					t.Errorf("Supports() = %v, want ErrUnsupported or ErrInvalid", err)
				}
			}
			if tt.wantBase != "" {
				if base, err := s.v2Base(); err != nil || base != f.root+tt.wantBase {
					t.Errorf("v2Base() = %q, %v; want %q", base, err, f.root+tt.wantBase)
				}
			}
		})
	}
}

func TestOwnCgroupNamespaceRoot(t *testing.T) {
	f, cfg := newFake(t, "mountinfo-container-v2", "cpu memory pids", "/docker/4f1c/init")
	s, err := detect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	own, err := s.ownCgroup()
	if want := f.root + "/mnt/cg v2/init"; err != nil || own != want {
		t.Errorf("ownCgroup() = %q, %v; want %q", own, err, want)
	}
	f.write(cfg.selfCgroup, "0::/elsewhere\n")
	if own, err := s.ownCgroup(); err == nil {
		t.Errorf("ownCgroup() outside the mount = %q, want error", own)
	}
}

// TestNewV2Fake creates groups in a fake pure-v2 tree as root would: the
// first creates the parent and enables the controllers, the second finds
// them ready and must not touch the root.
func TestNewV2Fake(t *testing.T) {
	f, cfg := newFake(t, "mountinfo-v2", "cpuset cpu io memory pids", "/")
	s, err := detect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.New("box", Limits{MemoryBytes: 32 << 20, Pids: 16, CPUs: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	root := f.v2
	leaf := root + "/pinfold/box"
	for path, want := range map[string]string{
		root + "/cgroup.subtree_control":         "+memory +pids +cpu",
		root + "/pinfold/cgroup.subtree_control": "+memory +pids +cpu",
		leaf + "/memory.max":                     "33554432",
		leaf + "/memory.swap.max":                "0",
		leaf + "/pids.max":                       "16",
		leaf + "/cpu.max":                        "50000 100000",
	} {
		if got := f.read(path); got != want {
			t.Errorf("%s = %q, want %q", path, got, want)
		}
	}
	if got := g.ProcsFiles(); !slices.Equal(got, []string{leaf + "/cgroup.procs"}) {
		t.Errorf("ProcsFiles() = %q", got)
	}
	if mem, pids := g.EventFiles(); mem != leaf+"/memory.events" || pids != leaf+"/pids.events" || !slices.Equal(g.Dirs(), []string{leaf}) {
		t.Errorf("EventFiles() = %q, %q; Dirs() = %q", mem, pids, g.Dirs())
	}
	if err := g.Join(4242); err != nil {
		t.Fatal(err)
	}
	if got := f.read(leaf + "/cgroup.procs"); got != "4242" {
		t.Errorf("cgroup.procs after Join = %q", got)
	}
	f.write(leaf+"/cgroup.procs", "") // Kill must not signal a real 4242
	f.write(leaf+"/memory.events", "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n")
	f.write(leaf+"/memory.peak", "33550336\n")
	f.write(leaf+"/pids.events", "max 5\n")
	f.write(leaf+"/cpu.stat", "usage_usec 80\nuser_usec 50\nsystem_usec 30\nnr_periods 9\nnr_throttled 4\nthrottled_usec 7\n")
	st, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if want := (Stats{OOMKills: 2, MemoryPeak: 33550336, PidsMaxHits: 5, CPUThrottled: 4}); st != want {
		t.Errorf("Stats() = %+v, want %+v", st, want)
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	if got := f.read(leaf + "/cgroup.kill"); got != "1" {
		t.Errorf("cgroup.kill = %q, want 1", got)
	}

	// Steady state: a second group writes neither the root's nor the
	// parent's cgroup.subtree_control. Their content, in the form the
	// kernel shows, would be overwritten by a "+memory ..." request.
	for _, p := range []string{root + "/cgroup.subtree_control", root + "/pinfold/cgroup.subtree_control"} {
		f.write(p, "memory pids cpu")
	}
	g2, err := s.New("box2", Limits{Pids: 3})
	if err != nil {
		t.Fatalf("second New() = %v", err)
	}
	for _, p := range []string{root + "/cgroup.subtree_control", root + "/pinfold/cgroup.subtree_control"} {
		if got := f.read(p); got != "memory pids cpu" {
			t.Errorf("%s = %q after a second New(), want untouched", p, got)
		}
	}
	if got := f.read(root + "/pinfold/box2/pids.max"); got != "3" {
		t.Errorf("box2 pids.max = %q", got)
	}
	if got := f.read(root + "/pinfold/box2/memory.max"); got != "" {
		t.Errorf("box2 memory.max = %q, want untouched", got)
	}
	if _, err := s.New("box2", Limits{Pids: 3}); !errors.Is(err, fs.ErrExist) {
		t.Errorf("New() of an existing name = %v, want ErrExist", err)
	}
	if _, err := os.Stat(root + "/pinfold/box2"); err != nil {
		t.Errorf("failed New() removed the existing group: %v", err)
	}

	for _, g := range []*Group{g, g2} {
		if err := g.Remove(); err != nil {
			t.Fatal(err)
		}
		if err := g.Remove(); err != nil {
			t.Errorf("second Remove() = %v", err)
		}
	}
	entries, _ := os.ReadDir(root + "/pinfold")
	for _, e := range entries {
		if e.IsDir() {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// TestNewV2FakeEnableOnMissingFile covers a parent that exists without
// the controller enabled: the first write finds no file, New enables the
// controllers once and retries. The fake does not add files to existing
// groups, so the retry fails too, and New must remove the leaf it made.
func TestNewV2FakeEnableOnMissingFile(t *testing.T) {
	f, cfg := newFake(t, "mountinfo-v2", "cpu memory pids", "/")
	f.write(f.v2+"/pinfold/cgroup.subtree_control", "")
	s, err := detect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.New("box", Limits{MemoryBytes: 8 << 20})
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "creating cgroup box") {
		t.Fatalf("New() = %v, want a not-exist error", err)
	}
	for _, p := range []string{f.v2 + "/cgroup.subtree_control", f.v2 + "/pinfold/cgroup.subtree_control"} {
		if got := f.read(p); got != "+memory" {
			t.Errorf("%s = %q, want +memory", p, got)
		}
	}
	if _, err := os.Stat(f.v2 + "/pinfold/box"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("leaf left behind after failed New(): %v", err)
	}
	if _, err := os.Stat(f.v2 + "/pinfold"); err != nil {
		t.Errorf("pre-existing parent removed: %v", err)
	}
}

// TestNewDelegatedFake creates a group as an unprivileged user whose
// cgroup's parent is delegated, as in a systemd user session.
func TestNewDelegatedFake(t *testing.T) {
	f, cfg := newFake(t, "mountinfo-v2", "cpu memory pids", userScope, "/sys/fs/cgroup")
	app := f.v2 + "/user.slice/user-1000.slice/user@1000.service/app.slice"
	f.write(app+"/cgroup.controllers", "cpu memory pids")
	f.write(app+"/cgroup.subtree_control", "cpu memory pids")
	f.write(app+"/cgroup.procs", "")
	s, err := detect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Supports(Limits{Pids: 4}); err != nil {
		t.Fatalf("Supports() = %v", err)
	}
	g, err := s.New("box", Limits{Pids: 4, CPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.read(app + "/pinfold/box/pids.max"); got != "4" {
		t.Errorf("pids.max = %q", got)
	}
	if got := f.read(app + "/pinfold/box/cpu.max"); got != "100000 100000" {
		t.Errorf("cpu.max = %q", got)
	}
	if got := f.read(f.v2 + "/cgroup.subtree_control"); got != "" {
		t.Errorf("root cgroup.subtree_control = %q, want untouched", got)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
}

// TestNewHybridFake spreads one group over a v1 memory hierarchy, a v1
// cpu hierarchy shared with cpuacct, and the cgroup2 tree for pids.
func TestNewHybridFake(t *testing.T) {
	f, cfg := newFake(t, "mountinfo-hybrid-systemd", "pids", "/")
	s, err := detect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.New("box", Limits{MemoryBytes: 16 << 20, Pids: 8, CPUs: 1.5})
	if err != nil {
		t.Fatal(err)
	}
	cg := f.root + "/sys/fs/cgroup"
	want := []string{
		cg + "/memory/pinfold/box/cgroup.procs",
		cg + "/cpu,cpuacct/pinfold/box/cgroup.procs",
		cg + "/unified/pinfold/box/cgroup.procs",
	}
	if got := g.ProcsFiles(); !slices.Equal(got, want) {
		t.Errorf("ProcsFiles() = %q\nwant %q", got, want)
	}
	// The waiter that takes the group over reads and removes these.
	mem, pids := g.EventFiles()
	if mem != cg+"/memory/pinfold/box/memory.oom_control" || pids != cg+"/unified/pinfold/box/pids.events" {
		t.Errorf("EventFiles() = %q, %q", mem, pids)
	}
	if got := g.Dirs(); !slices.Equal(got, []string{cg + "/memory/pinfold/box", cg + "/cpu,cpuacct/pinfold/box", cg + "/unified/pinfold/box"}) {
		t.Errorf("Dirs() = %q", got)
	}
	for path, want := range map[string]string{
		cg + "/memory/pinfold/box/memory.limit_in_bytes":       "16777216",
		cg + "/memory/pinfold/box/memory.memsw.limit_in_bytes": "16777216",
		cg + "/cpu,cpuacct/pinfold/box/cpu.cfs_quota_us":       "150000",
		cg + "/cpu,cpuacct/pinfold/box/cpu.cfs_period_us":      "", // default kept
		cg + "/unified/pinfold/box/pids.max":                   "8",
		cg + "/unified/cgroup.subtree_control":                 "+pids",
	} {
		if got := f.read(path); got != want {
			t.Errorf("%s = %q, want %q", path, got, want)
		}
	}
	f.write(cg+"/memory/pinfold/box/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
	f.write(cg+"/memory/pinfold/box/memory.max_usage_in_bytes", "16773120\n")
	f.write(cg+"/unified/pinfold/box/pids.events", "max 9\n")
	f.write(cg+"/cpu,cpuacct/pinfold/box/cpu.stat", "nr_periods 3\nnr_throttled 2\nthrottled_time 5\n")
	st, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if want := (Stats{OOMKills: 1, MemoryPeak: 16773120, PidsMaxHits: 9, CPUThrottled: 2}); st != want {
		t.Errorf("Stats() = %+v, want %+v", st, want)
	}
	// Clean finds the group in all three places.
	removed, err := s.Clean(func(string) bool { return false })
	if err != nil || !slices.Equal(removed, []string{"box"}) {
		t.Fatalf("Clean() = %q, %v", removed, err)
	}
	for _, p := range want {
		if _, err := os.Stat(filepath.Dir(p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still there: %v", filepath.Dir(p), err)
		}
	}
}

// TestNewSharedHierarchyFake uses a v1 mount holding memory and pids
// together: the group gets one directory there, not two.
func TestNewSharedHierarchyFake(t *testing.T) {
	f, cfg := newFake(t, "mountinfo-container-v2", "cpu memory pids", "/docker/4f1c/init")
	s, err := detect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.New("box", Limits{MemoryBytes: 8 << 20, Pids: 8})
	if err != nil {
		t.Fatal(err)
	}
	dir := f.root + "/mnt/mem/pinfold/box"
	if got := g.ProcsFiles(); !slices.Equal(got, []string{dir + "/cgroup.procs"}) {
		t.Errorf("ProcsFiles() = %q", got)
	}
	if f.read(dir+"/memory.limit_in_bytes") != "8388608" || f.read(dir+"/pids.max") != "8" {
		t.Error("limits not written")
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
}

// TestNewFailureCleansUpFake makes the second hierarchy fail and checks
// that the first hierarchy's new directories are removed, parent too.
func TestNewFailureCleansUpFake(t *testing.T) {
	f, cfg := newFake(t, "mountinfo-hybrid-host", "", "/")
	// pids.max cannot be opened for writing: make it a directory.
	inner := cfg.mkdir
	cfg.mkdir = func(dir string) error {
		if err := inner(dir); err != nil {
			return err
		}
		if strings.HasSuffix(dir, "/pids/pinfold/box") {
			os.Remove(dir + "/pids.max")
			return os.Mkdir(dir+"/pids.max", 0o755)
		}
		return nil
	}
	cfg.rmdir = func(dir string) error { return os.RemoveAll(dir) }
	s, err := detect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.New("box", Limits{MemoryBytes: 8 << 20, Pids: 4}); err == nil {
		t.Fatal("New() = nil error, want failure")
	}
	for _, d := range []string{"/sys/fs/cgroup/memory/pinfold", "/sys/fs/cgroup/pids/pinfold"} {
		if _, err := os.Stat(f.root + d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s left behind: %v", d, err)
		}
	}
}
