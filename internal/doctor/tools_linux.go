package doctor

// The container engines' checks: their clients, tini, runc where crun
// cannot run, and docker's daemon.

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/pinfold/pinfold/internal/preflight"
	"golang.org/x/sys/unix"
)

// toolChecks are "NAME" (installed, version) and "NAME.reachable" for
// podman or docker, both optional backends: missing or unreachable is a
// warning.
func toolChecks(ctx context.Context, name string) []Check {
	c := Check{ID: name, Title: name}
	path, err := exec.LookPath(name)
	if err != nil {
		c.Status = Warn
		c.Detail = "not installed (optional: pinfold's own sandbox does not need it)"
		pkg := "podman"
		if name == "docker" {
			pkg = "docker.io"
		}
		c.Fix = "to use backend: " + name + ", install it (apt-get install " + pkg + ")"
		return []Check{c}
	}
	vctx, cancel := context.WithTimeout(ctx, toolTimeout)
	ver, err := preflight.RunOut(probeCmdEnv(vctx, path, "version", "--format", "{{.Client.Version}}"))
	cancel()
	if err != nil && ver == "" {
		c.Status = Warn
		c.Detail = path + ": " + name + " version failed: " + err.Error()
		c.Fix = "run " + name + " version to see why"
	} else {
		c.Status = Pass
		c.Detail = name + " " + preflight.LastLine(ver) + " (" + path + ")"
	}
	r := Check{ID: name + ".reachable", Title: name + " service"}
	if name == "podman" {
		ictx, cancel := context.WithTimeout(ctx, infoTimeout)
		arch, err := preflight.RunOut(probeCmdEnv(ictx, path, "info", "--format", "{{.Host.Arch}}"))
		cancel()
		if err != nil {
			r.Status = Warn
			r.Detail = "podman info failed: " + err.Error()
			r.Fix = "run podman info to see why (rootless podman needs entries in /etc/subuid and /etc/subgid)"
		} else {
			r.Status = Pass
			r.Detail = "podman info works (" + preflight.LastLine(arch) + ")"
		}
		return []Check{c, r}
	}
	r.Title = "docker daemon"
	dockerReachable(ctx, path, &r)
	return []Check{c, r}
}

// probeCmdEnv is a probe child that keeps the caller's environment
// (DOCKER_HOST, XDG_RUNTIME_DIR, CONTAINER_HOST... choose the daemon).
func probeCmdEnv(ctx context.Context, path string, args ...string) *exec.Cmd {
	cmd := preflight.ProbeCmd(ctx, path, args...)
	cmd.Env = nil
	return cmd
}

// dockerReachable pings the daemon: over its unix socket by hand when
// DOCKER_HOST is unset or unix://, else through docker version.
func dockerReachable(ctx context.Context, path string, r *Check) {
	dh := os.Getenv("DOCKER_HOST")
	sock := "/var/run/docker.sock"
	if dh != "" {
		p, ok := strings.CutPrefix(dh, "unix://")
		if !ok {
			vctx, cancel := context.WithTimeout(ctx, toolTimeout)
			v, err := preflight.RunOut(probeCmdEnv(vctx, path, "version", "--format", "{{.Server.Version}}"))
			cancel()
			if err != nil {
				r.Status = Warn
				r.Detail = "no daemon answers at " + dh + ": " + err.Error()
				r.Fix = "start the daemon DOCKER_HOST names, or unset DOCKER_HOST"
				return
			}
			r.Status = Pass
			r.Detail = "daemon " + preflight.LastLine(v) + " answers at " + dh
			return
		}
		sock = p
	}
	line, err := pingDocker(sock, 3*time.Second)
	switch {
	case err == nil:
		r.Status = Pass
		r.Detail = "daemon answers at unix://" + sock + " (" + line + ")"
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ECONNREFUSED):
		r.Status = Warn
		r.Detail = "no daemon listening at unix://" + sock
		r.Fix = startDocker() + ", or set DOCKER_HOST to where it listens"
	case errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM):
		r.Status = Warn
		r.Detail = "no permission to connect to unix://" + sock
		r.Fix = "use rootless docker and set DOCKER_HOST, or run as a member of the docker group (which is as powerful as root)"
	default:
		r.Status = Warn
		r.Detail = "the daemon at unix://" + sock + " did not answer: " + err.Error()
		r.Fix = "check that the daemon runs: systemctl status docker"
	}
}

// startDocker says how to start the docker daemon on this machine: through
// systemd where it runs, else by hand (containers and CI machines often
// boot without it).
func startDocker() string {
	if fi, err := os.Stat("/run/systemd/system"); err == nil && fi.IsDir() {
		return "start it: systemctl start docker"
	}
	return "start it as root (no systemd here): dockerd >/var/log/dockerd.log 2>&1 &"
}
