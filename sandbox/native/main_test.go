package native_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinfold/pinfold/internal/nettest"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/native"
)

// attackerDir holds the attacker binary (testdata/attacker), mounted
// read-only into sandboxes at /pinfold-test.
var attackerDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pinfold-attacker-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Chmod(dir, 0o755)
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "attacker"), "./testdata/attacker")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the attacker: %v\n%s", err, out)
		os.Exit(1)
	}
	if _, err := nettest.BuildClient(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if _, err := nettest.BuildHelper(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	attackerDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if leaks := leakedProcesses(); len(leaks) > 0 {
			fmt.Fprintf(os.Stderr, "processes left behind: %v\n", leaks)
			code = 1
		}
	}
	os.Exit(code)
}

const attackerPath = "/pinfold-test/attacker"

// baseSpec is a sandbox with a fresh workspace and the attacker mounted.
func baseSpec(t *testing.T) sandbox.Spec {
	t.Helper()
	ws := t.TempDir()
	return sandbox.Spec{
		Workspace: ws,
		Mounts:    []sandbox.Mount{{Source: attackerDir, Target: "/pinfold-test", ReadOnly: true}},
		Limits:    sandbox.Limits{TmpSize: 64 << 20},
	}
}

type probe struct {
	Probe string `json:"probe"`
	Err   string `json:"err"`
	Out   string `json:"out"`
}

// run runs args in a sandbox made from spec and returns the result and
// what the command wrote.
func run(t *testing.T, spec sandbox.Spec, cmd *sandbox.Cmd, opts ...native.Option) (*sandbox.Result, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	if cmd.Stdout == nil {
		cmd.Stdout = &out
	}
	if cmd.Stderr == nil {
		cmd.Stderr = &errb
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := native.Run(ctx, spec, cmd, opts...)
	if err != nil {
		t.Fatalf("running %q: %v", cmd.Args, err)
	}
	return res, out.String(), errb.String()
}

// attack runs the attacker with args and returns its probes by name.
func attack(t *testing.T, spec sandbox.Spec, args ...string) map[string]probe {
	t.Helper()
	res, out, errs := run(t, spec, &sandbox.Cmd{Args: append([]string{attackerPath}, args...)})
	if res.ExitCode != 0 {
		t.Fatalf("attacker %v exited %d: %s%s", args, res.ExitCode, out, errs)
	}
	probes := map[string]probe{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var p probe
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			t.Fatalf("bad attacker output %q: %v", sc.Text(), err)
		}
		probes[p.Probe] = p
	}
	return probes
}

// want checks that a probe failed with one of the given errno names.
func want(t *testing.T, probes map[string]probe, name string, errnos ...string) {
	t.Helper()
	p, ok := probes[name]
	if !ok {
		t.Errorf("probe %q did not run (have %v)", name, probes)
		return
	}
	for _, e := range errnos {
		if p.Err == e {
			return
		}
	}
	t.Errorf("probe %q: got err %q out %q, want one of %v", name, p.Err, p.Out, errnos)
}

// leakedProcesses lists host processes still running something a test
// marked with "pinfold-native-test-marker".
func leakedProcesses() []string {
	var leaks []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if bytes.Contains(b, []byte("pinfold-native-test-marker")) {
			leaks = append(leaks, e.Name()+":"+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return leaks
}

// waitNoLeaks waits up to d for marked processes to disappear.
func waitNoLeaks(t *testing.T, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		leaks := leakedProcesses()
		if len(leaks) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes survived: %v", leaks)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CI runs these as root)")
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// readAll reads a terminal until it reports the other side is gone.
func readAll(f *os.File) string {
	var b bytes.Buffer
	buf := make([]byte, 4096)
	for {
		n, err := f.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

// lockedBuffer is a bytes.Buffer a test may read while a sandbox's
// output is copied into it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
