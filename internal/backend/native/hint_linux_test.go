package native

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// hintConfig is a minimal sandbox whose command can print its hostname.
func hintConfig(hostname string) *Config {
	const rdonly, nosuid, nodev = 1, 2, 4
	ops := []Op{{Kind: OpMkdir, B: "/dev", Mode: 0755},
		{Kind: OpMount, A: "tmpfs", B: "/dev", C: "tmpfs", D: "mode=0755", MountFlags: syscall.MS_NOSUID},
		{Kind: OpMkfile, B: "/dev/null", Mode: 0666},
		{Kind: OpBind, Flags: OpHostSource, A: "/dev/null", B: "/dev/null"},
	}
	for _, d := range []string{"/usr", "/etc"} {
		ops = append(ops, Op{Kind: OpMkdir, B: d, Mode: 0755},
			Op{Kind: OpBind, Flags: OpHostSource, A: d, B: d, MountFlags: syscall.MS_REC, Attr: rdonly | nosuid | nodev})
	}
	for _, l := range []string{"bin", "lib", "lib64"} {
		ops = append(ops, Op{Kind: OpSymlink, A: "usr/" + l, B: "/" + l})
	}
	return &Config{
		SpawnConfig: SpawnConfig{
			Namespaces: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWNET,
			UIDMap:     "0 1879048192 65536\n", GIDMap: "0 1879048192 65536\n", InitID: &ID{0, 0},
		},
		User: &ID{0, 0},
		Ops:  ops, Hostname: hostname, Scratch: "/tmp", LoopbackUp: true, RootReadOnly: true, CapLast: 40, NoNewPrivs: true,
	}
}

// queuedInit spawns an init for c's spawn and queues cfg on its socket
// before it runs, as the launcher does with a config hint.
func queuedInit(t *testing.T, c *Config, cfg *Config) *Init {
	t.Helper()
	in, err := Spawn(&c.SpawnConfig)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := EncodeConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Sendmsg(in.sock, msg, nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	in.queued = msg
	return in
}

// hostnameOf runs uname -n in the configured init and returns its output.
func hostnameOf(t *testing.T, in *Init) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = in.Exec(&Exec{Args: []string{"uname", "-n"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/", Setsid: true,
		Stdio: []int{0, int(w.Fd()), 2}})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	out.ReadFrom(r)
	if st, err := in.Wait(); err != nil || st.Wait.ExitStatus() != 0 {
		t.Fatalf("hostname: %+v %v", st, err)
	}
	return strings.TrimSpace(out.String())
}

// TestConfigHintQueued: a config queued before the init ran (a config
// hint, initc/launch.c: pre_spawn) is acted on; Configure with the same
// config sends nothing more, and with another refuses (ErrConfigHint),
// so that the caller never runs a command in a root it did not ask for.
func TestConfigHintQueued(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for the id maps")
	}
	c := hintConfig("hinted")
	in := queuedInit(t, c, c)
	if err := in.Configure(c); err != nil {
		t.Fatal(err)
	}
	if in.Hinted() == 0 {
		t.Error("the queued config was not taken as the init's")
	}
	if h := hostnameOf(t, in); h != "hinted" {
		t.Errorf("hostname %q, want hinted", h)
	}
	if _, cfg, _ := in.Sent(); len(cfg) == 0 {
		t.Error("the queued config is not among the messages a launch record replays")
	}
	in.Close()

	// Another config (the hint is stale): refused, the init discarded.
	in = queuedInit(t, c, hintConfig("stale"))
	if err := in.Configure(c); !errors.Is(err, ErrConfigHint) {
		t.Fatalf("Configure with another config than the queued one: %v, want ErrConfigHint", err)
	}
	in.Discard()
	in, err := Start(c)
	if err != nil {
		t.Fatal(err)
	}
	if h := hostnameOf(t, in); h != "hinted" {
		t.Errorf("hostname %q after a stale hint, want hinted", h)
	}
	in.Close()
}

func TestSplitHint(t *testing.T) {
	spawn, err := EncodeSpawn(&hintConfig("x").SpawnConfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := EncodeConfig(hintConfig("x"))
	if err != nil {
		t.Fatal(err)
	}
	both := append(bytes.Clone(spawn), cfg...)
	for _, c := range []struct {
		name       string
		b          []byte
		spawn, cfg []byte
	}{
		{"spawn and config", both, spawn, cfg},
		{"spawn alone", spawn, spawn, nil},
		{"a truncated config", both[:len(both)-1], both[:len(both)-1], nil},
		{"a config after garbage", append(bytes.Clone(spawn), 9, 9, 9, 9, 9, 9, 9, 9), append(bytes.Clone(spawn), 9, 9, 9, 9, 9, 9, 9, 9), nil},
	} {
		s, g := splitHint(c.b)
		if !bytes.Equal(s, c.spawn) || !bytes.Equal(g, c.cfg) {
			t.Errorf("%s: split into %d and %d bytes, want %d and %d", c.name, len(s), len(g), len(c.spawn), len(c.cfg))
		}
	}
}

// TestConfigHintFileMatchesLauncher: the launcher names a config hint by
// the head of the launch key it builds; the Go side's name must be the
// same. The launcher's key is the Go one's (TestLaunchKey...), so the
// head is checked here against LaunchKey's bytes.
func TestConfigHintFileMatchesLauncher(t *testing.T) {
	prefix, cwd := []string{"run", "--access", "ro", "--"}, "/some/dir"
	key, err := LaunchKey(prefix, cwd, []string{"A=1"})
	if err != nil {
		t.Fatal(err)
	}
	head := key[:bytes.Index(key, []byte("\x00eA=1"))+1]
	want := filepath.Join("/st", "hints", filepath.Base(LaunchFile("/", head)))
	if got := ConfigHintFile("/st", false, prefix, cwd); got != want {
		t.Errorf("ConfigHintFile = %s, want %s", got, want)
	}
	if got := ConfigHintFile("/st", true, prefix, cwd); got != want+".trace" {
		t.Errorf("traced: %s, want %s.trace", got, want)
	}
}

func TestBootIDAndReplaceFile(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	if id, err := BootID(); err != nil || id != string(b[:36]) {
		t.Errorf("BootID = %q, %v; want %q", id, err, b[:36])
	}
	path := filepath.Join(t.TempDir(), "f")
	for _, data := range []string{"first, longer", "second"} {
		if err := replaceFile(path, []byte(data)); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		got, _ := os.ReadFile(path)
		if err != nil || fi.Mode().Perm() != 0o600 || string(got) != data {
			t.Fatalf("after replaceFile(%q): %q, %v", data, got, err)
		}
	}
	if m, _ := filepath.Glob(path + ".tmp*"); len(m) > 0 {
		t.Errorf("temporary files left: %v", m)
	}
}
