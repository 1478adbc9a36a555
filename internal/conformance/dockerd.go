package conformance

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// StartDockerd starts a docker daemon of the tests' own (its data, socket
// and pid file in dir, no bridge or iptables: containers here have no
// network or the host's) and points the docker client at it. It returns
// a function that stops it. The conformance suite and the pack tests
// (internal/cli) use it when no docker daemon of their own is running.
func StartDockerd(dir string) (func(), error) {
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
