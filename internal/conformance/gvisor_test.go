package conformance_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pinfold/pinfold/client"
	"github.com/pinfold/pinfold/internal/conformance"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/container"
	"github.com/pinfold/pinfold/sandbox/gvisor"
)

// TestGVisor runs the suite on runsc (PINFOLD_RUNSC, or beside pinfold,
// or on the PATH: scripts/test-setup.sh builds it). On CI a missing
// runsc fails the suite.
func TestGVisor(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the conformance suite runs as root (limits, test hosts in network namespaces)")
	}
	if os.Getenv(gvisor.RunscEnv) == "" {
		if p := "/var/cache/pinfold-tools/runsc"; fileExists(p) {
			t.Setenv(gvisor.RunscEnv, p)
		}
	}
	rt := gvisor.NewRuntime()
	if err := rt.Check(context.Background(), nil); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	conformance.Run(t, conformance.Target{Backend: gvisor.Name,
		Runtime: func(store string) sandbox.Runtime { return gvisor.NewRuntime(gvisor.WithStore(store)) },
		Pinfold: filepath.Join(tools, "pinfold"), Tools: tools, Leftovers: gvisor.Leftovers,
		GuestKernel: "gVisor's Sentry answers the command's system calls: the ids it sees are its own kernel's, and its Sentry and gofer run as the sandbox range (TestHostIDs in sandbox/gvisor)",
		TTYUnnamed:  "runsc gives the command a host terminal, which gVisor's kernel shows as a host descriptor, not as one of its /dev/pts"})
}

// gvisorRuntime returns the runtime with runsc found, or skips (fails on
// CI).
func gvisorRuntime(t *testing.T) *gvisor.Runtime {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the gvisor runtime runs as root")
	}
	if os.Getenv(gvisor.RunscEnv) == "" {
		if p := "/var/cache/pinfold-tools/runsc"; fileExists(p) {
			t.Setenv(gvisor.RunscEnv, p)
		}
	}
	rt := gvisor.NewRuntime()
	if err := rt.Check(context.Background(), nil); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	return rt
}

// TestGVisorSession runs the session scenarios on gVisor (the library's
// sandbox.Sessioner): the agent's socket is a host one that runsc's
// gofer made. The session's commands are the Sentry's tasks, not host
// processes: they are looked for inside, and after Close what is looked
// for is runsc's processes.
func TestGVisorSession(t *testing.T) {
	rt := gvisorRuntime(t)
	t.Setenv("PINFOLD_AGENT", filepath.Join(tools, "pinfold"))
	ws := t.TempDir()
	os.Chmod(ws, 0o755)
	st := conformance.SessionTarget{Sessioner: rt,
		Spec: sandbox.Spec{Workspace: ws, Access: sandbox.AccessChangeset, Changeset: &sandbox.Capture{Upper: t.TempDir(), Work: t.TempDir()},
			Limits: sandbox.Limits{TmpSize: 64 << 20}},
		Processes: func(sess sandbox.Session, pattern string) []string {
			var out bytes.Buffer
			p, err := sess.Run(context.Background(), &sandbox.Cmd{Args: []string{"sh", "-c", `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < "$f"; echo; done`}, Stdout: &out})
			if errors.Is(err, sandbox.ErrClosed) {
				return conformance.ProcessesWith(gvisor.Dir + "/" + container.Owner() + "-")
			}
			if err != nil {
				t.Fatal(err)
			}
			p.Wait()
			var found []string
			for _, l := range strings.Split(out.String(), "\n") {
				if strings.Contains(l, pattern) {
					found = append(found, l)
				}
			}
			return found
		}}
	if _, err := exec.LookPath("python3"); err == nil {
		st.Python = true
		st.ServeHTTP = "cd /tmp && (python3 -m http.server --bind 127.0.0.1 8766 >/dev/null 2>&1 &); " +
			"for i in $(seq 100); do python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8766))' 2>/dev/null && break; sleep 0.05; done"
	}
	conformance.Session(t, st)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestGVisorCleanLimits: a gVisor run with limits whose pinfold is
// killed leaves cgroups (pinfold's group, and runsc's own in the other
// hierarchies); pinfold clean removes them all.
func TestGVisorCleanLimits(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the gvisor runtime runs as root")
	}
	if os.Getenv(gvisor.RunscEnv) == "" {
		if p := "/var/cache/pinfold-tools/runsc"; fileExists(p) {
			t.Setenv(gvisor.RunscEnv, p)
		}
	}
	if err := gvisor.NewRuntime().Check(context.Background(), nil); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	ws, store := t.TempDir(), t.TempDir()
	cmd := exec.Command(filepath.Join(tools, "pinfold"), "run", "--backend", "gvisor", "--access", "rw", "--memory", "256m", "--pids", "64", "--",
		"sh", "-c", "echo started > started; sleep 60")
	cmd.Dir = ws
	cmd.Env = append(os.Environ(), "PINFOLD_STORE="+store, "PINFOLD_NO_LAUNCH_CACHE=1")
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(60 * time.Second); !fileExists(filepath.Join(ws, "started")); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal("the command never started")
		}
	}
	// v1 hierarchies, or the cgroup2 tree alone.
	glob := func() []string {
		v1, _ := filepath.Glob("/sys/fs/cgroup/*/pinfold/" + strconv.Itoa(cmd.Process.Pid) + "-*")
		v2, _ := filepath.Glob("/sys/fs/cgroup/pinfold/" + strconv.Itoa(cmd.Process.Pid) + "-*")
		return append(v1, v2...)
	}
	if made := glob(); len(made) == 0 {
		t.Errorf("the run made no cgroup")
	}
	cmd.Process.Kill()
	cmd.Wait()
	var left []string
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		clean := exec.Command(filepath.Join(tools, "pinfold"), "clean")
		clean.Env = append(os.Environ(), "PINFOLD_STORE="+store)
		if b, err := clean.CombinedOutput(); err != nil {
			t.Fatalf("pinfold clean: %v\n%s", err, b)
		}
		if left = glob(); len(left) == 0 {
			return
		}
	}
	t.Errorf("left after pinfold clean: %v", left)
}

// TestGVisorSessionsServed: sessions on gVisor through pinfold's own
// front ends: pinfold session start, pinfold exec and the changeset after
// stop; then pinfold serve's HTTP API (create, exec, delete), with
// limits and pinfold's network.
func TestGVisorSessionsServed(t *testing.T) {
	gvisorRuntime(t)
	store, ws := t.TempDir(), t.TempDir()
	os.Chmod(ws, 0o755)
	os.WriteFile(filepath.Join(ws, "pinfold.yaml"), []byte("version: 1\n"), 0o644)
	env := append(os.Environ(), "PINFOLD_STORE="+store)
	pf := func(args ...string) (string, error) {
		c := exec.Command(filepath.Join(tools, "pinfold"), args...)
		c.Dir, c.Env = ws, env
		b, err := c.CombinedOutput()
		return string(b), err
	}
	out, err := pf("session", "start", "--backend", "gvisor", "--name", "gv", "--memory", "512m")
	if err != nil {
		t.Fatalf("session start: %v\n%s", err, out)
	}
	defer pf("session", "stop", "gv")
	if out, err := pf("exec", "gv", "--", "sh", "-c", "echo from-gvisor > made; echo bg > /tmp/kept; (sleep 300 &); cat /proc/version"); err != nil || !strings.Contains(out, "gvisor") {
		t.Fatalf("exec: %v\n%s", err, out)
	}
	if out, err := pf("exec", "gv", "--", "cat", "/tmp/kept"); err != nil || !strings.Contains(out, "bg") {
		t.Errorf("a second exec does not see the first's /tmp: %v\n%s", err, out)
	}
	if out, err := pf("session", "stop", "gv"); err != nil {
		t.Fatalf("session stop: %v\n%s", err, out)
	}
	if out, err := pf("diff"); err != nil || !strings.Contains(out, "made") {
		t.Errorf("the session's changeset: %v\n%s", err, out)
	}
	if out, err := pf("apply"); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "made")); string(b) != "from-gvisor\n" {
		t.Errorf("applied: %q", b)
	}

	serve := exec.Command(filepath.Join(tools, "pinfold"), "serve")
	serve.Env = env
	var log bytes.Buffer
	serve.Stdout, serve.Stderr = &log, &log
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		serve.Process.Signal(syscall.SIGTERM)
		serve.Wait()
	}()
	sock := filepath.Join(store, "api.sock")
	for end := time.Now().Add(20 * time.Second); !fileExists(sock); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("no server socket")
		}
	}
	c, err := client.New("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb, err := c.Create(ctx, client.CreateRequest{Workspace: ws, Backend: "gvisor", Access: "rw", Network: "outbound"})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Args: []string{"sh", "-c", "cat /proc/version; cat /etc/resolv.conf; echo api > api-made"}})
	if err != nil || res.ExitCode != 0 || !strings.Contains(res.Stdout, "gvisor") || !strings.Contains(res.Stdout, "nameserver 10.0.2.3") {
		t.Errorf("exec through the API: %+v %v", res, err)
	}
	if _, err := c.Delete(ctx, sb.ID); err != nil {
		t.Errorf("delete: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "api-made")); string(b) != "api\n" {
		t.Errorf("the API session's write: %q", b)
	}
}

// TestGVisorDisk: --disk gives a gVisor run the volume's /tmp, which
// counts with the changeset's writes: past the cap writes fail with
// ENOSPC and the run says it hit its cap; within it they land.
func TestGVisorDisk(t *testing.T) {
	gvisorRuntime(t)
	store, ws := t.TempDir(), t.TempDir()
	os.Chmod(ws, 0o755)
	os.WriteFile(filepath.Join(ws, "pinfold.yaml"), []byte("version: 1\n"), 0o644)
	run := func(script string) (string, string) {
		c := exec.Command(filepath.Join(tools, "pinfold"), "run", "--backend", "gvisor", "--disk", "32m", "--", "sh", "-c", script)
		c.Dir, c.Env = ws, append(os.Environ(), "PINFOLD_STORE="+store, "PINFOLD_NO_LAUNCH_CACHE=1")
		var out, errs bytes.Buffer
		c.Stdout, c.Stderr = &out, &errs
		c.Run()
		return out.String(), errs.String()
	}
	out, errs := run("echo kept > /tmp/t && cat /tmp/t && echo in-ws > made && echo ok")
	if out != "kept\nok\n" || strings.Contains(errs, "disk cap") {
		t.Errorf("within the cap: %q %q", out, errs)
	}
	out, errs = run("head -c 20000000 /dev/zero > /tmp/a && echo tmp-ok; head -c 20000000 /dev/zero > big || echo full")
	if out != "tmp-ok\nfull\n" || !strings.Contains(errs, "hit its disk cap") {
		t.Errorf("past the cap: %q %q", out, errs)
	}
}
