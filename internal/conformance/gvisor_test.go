package conformance_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/pinfold/pinfold/internal/conformance"
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
	conformance.Run(t, conformance.Target{Backend: gvisor.Name, Runtime: rt,
		Pinfold: filepath.Join(tools, "pinfold"), Tools: tools, Leftovers: gvisor.Leftovers,
		GuestKernel: "gVisor's Sentry answers the command's system calls: the ids it sees are its own kernel's, and its Sentry and gofer run as the sandbox range (TestHostIDs in sandbox/gvisor)",
		TTYUnnamed:  "runsc gives the command a host terminal, which gVisor's kernel shows as a host descriptor, not as one of its /dev/pts"})
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
	groups := "/sys/fs/cgroup/*/pinfold/" + strconv.Itoa(cmd.Process.Pid) + "-*"
	if made, _ := filepath.Glob(groups); len(made) < 2 {
		t.Errorf("the run's cgroups: %v, want pinfold's and runsc's", made)
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
		left, _ = filepath.Glob(groups)
		if len(left) == 0 {
			return
		}
	}
	t.Errorf("left after pinfold clean: %v", left)
}
