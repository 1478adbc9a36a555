package host

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

// Cmd is a command to run on the host.
type Cmd struct {
	Args                  []string
	Env                   []string
	Dir                   string
	Stdin, Stdout, Stderr *os.File
}

// Run runs c and returns its exit status: its own, or 128+N when signal
// N killed it. The command stays in the caller's process group, so a
// terminal's Ctrl-C reaches it directly, as if pinfold were not there;
// SIGTERM and SIGHUP sent to the caller are relayed to it.
func Run(ctx context.Context, c *Cmd) (int, error) {
	path := c.Args[0]
	if lp, err := lookPath(path, c.Env); err == nil {
		path = lp
	} else {
		return 0, err
	}
	cmd := &exec.Cmd{Path: path, Args: c.Args, Env: c.Env, Dir: c.Dir, Stdin: c.Stdin, Stdout: c.Stdout, Stderr: c.Stderr}
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	// The terminal's SIGINT and SIGQUIT go to the command itself; pinfold
	// waits for it like a shell does.
	signal.Ignore(syscall.SIGINT, syscall.SIGQUIT)
	defer signal.Reset(syscall.SIGINT, syscall.SIGQUIT)
	relay := make(chan os.Signal, 2)
	signal.Notify(relay, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(relay)
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-relay:
				cmd.Process.Signal(s)
			case <-ctx.Done():
				cmd.Process.Kill()
				return
			case <-done:
				return
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	return 0, err
}

// lookPath finds name in the PATH of env (the command's, not pinfold's).
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := ""
	for _, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			path = kv[5:]
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", &exec.Error{Name: name, Err: exec.ErrNotFound}
}
