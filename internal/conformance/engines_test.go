package conformance_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/pinfold/pinfold/internal/conformance"
	"github.com/pinfold/pinfold/sandbox/container"
)

// startDockerd starts a docker daemon of the tests' own (its data, socket
// and pid file in dir, no bridge or iptables: containers here have no
// network or the host's) and points the docker client at it. It returns
// a function that stops it.
func startDockerd(dir string) (func(), error) {
	if _, err := exec.LookPath("dockerd"); err != nil {
		return nil, fmt.Errorf("dockerd is not installed (apt install docker.io): %w", err)
	}
	sock := filepath.Join(dir, "docker.sock")
	cmd := exec.Command("dockerd", "--data-root", filepath.Join(dir, "data"), "--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "docker.pid"), "-H", "unix://"+sock, "--bridge", "none", "--iptables=false", "--ip6tables=false")
	log, err := os.Create(filepath.Join(dir, "dockerd.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop := func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		log.Close()
	}
	os.Setenv("DOCKER_HOST", "unix://"+sock)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if exec.Command("docker", "version").Run() == nil {
			return stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			b, _ := os.ReadFile(filepath.Join(dir, "dockerd.log"))
			return nil, fmt.Errorf("dockerd did not answer within 60 s: %s", b)
		}
	}
}

func containerTarget(t *testing.T, rt *container.Runtime) conformance.Target {
	if os.Geteuid() != 0 {
		t.Skip("the conformance suite runs as root (limits, test hosts in network namespaces)")
	}
	if err := rt.Check(context.Background(), nil); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v", err) // CI installs both engines: a failed check is a failure
		}
		t.Skipf("%v", err)
	}
	return conformance.Target{Backend: rt.Name(), Runtime: rt, Pinfold: filepath.Join(tools, "pinfold"), Tools: tools,
		Leftovers: rt.Leftovers}
}

func TestPodman(t *testing.T) {
	conformance.Run(t, containerTarget(t, container.Podman()))
}

func TestDocker(t *testing.T) {
	if dockerErr != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(dockerErr)
		}
		t.Skip(dockerErr)
	}
	conformance.Run(t, containerTarget(t, container.Docker()))
}
