package apihelper

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/pinfold/pinfold/client"
	"github.com/pinfold/pinfold/internal/helper"
	"github.com/pinfold/pinfold/internal/serveconf"
	"github.com/pinfold/pinfold/internal/server"
	"github.com/pinfold/pinfold/internal/store"
)

// serve runs the API server until SIGINT or SIGTERM.
func serve(args []string) int {
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	c := serveconf.Default()
	c.Flags(fs, true)
	if err := fs.Parse(args); err != nil {
		return 125
	}
	lim := server.Bounds{MaxConns: c.MaxConns, HeaderTimeout: c.HeaderTimeout, BodyTimeout: c.BodyTimeout, WriteTimeout: c.WriteTimeout, IdleTimeout: c.IdleTimeout}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "pinfold: "+client.CodeAPI+" "+format+"\n", a...)
		return 125
	}
	if err := c.Check(); err != nil {
		return fail("%v", err)
	}
	dir, err := store.DefaultDir()
	if err != nil {
		return fail("%v", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fail("%v", err)
	}
	cfg := server.Config{Store: dir, Version: c.Version, MaxUpload: c.MaxUpload, MaxBody: c.MaxBody}
	if cfg.Pinfold, err = pinfoldBinary(); err != nil {
		return fail("%v", err)
	}
	if c.Listen != "" {
		if c.Tokens == "" {
			return fail("--listen needs --tokens: no request is served on TCP without a token")
		}
		if cfg.Tokens, err = server.ReadTokens(c.Tokens); err != nil {
			return fail("%v", err)
		}
	}
	if c.Policy != "" {
		if cfg.Policy, err = server.ReadPolicy(c.Policy); err != nil {
			return fail("the policy file: %v", err)
		}
	}
	if c.Socket == "" {
		c.Socket = server.DefaultSocket(dir)
	}
	// Caught before the socket shows: whoever sees it may stop the
	// server at once, which must then remove it (and a warm pool).
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	signal.Ignore(syscall.SIGPIPE, syscall.SIGHUP)
	ul, err := server.ListenUnix(c.Socket)
	if err != nil {
		return fail("%v", err)
	}
	defer os.Remove(c.Socket)
	ls := []net.Listener{ul}
	fmt.Fprintf(os.Stderr, "pinfold: serving on unix:%s", c.Socket)
	if c.Listen != "" {
		tl, err := net.Listen("tcp", c.Listen)
		if err != nil {
			return fail("%v", err)
		}
		ls = append(ls, tl)
		fmt.Fprintf(os.Stderr, " and %s", listenURL(c.Listen, tl.Addr()))
	}
	fmt.Fprintln(os.Stderr)
	// Tenants' workspaces are fresh directories of TENANTS/T: the
	// kubernetes runtime mounts T's directory in their pods, so that one
	// warm pod serves any of T's sessions.
	os.Setenv("PINFOLD_KUBE_TENANTS", server.TenantsDir(dir))
	if c.KubePool > 0 {
		stopPool, err := startPool(dir, c.KubePool)
		if err != nil {
			return fail("%v", err)
		}
		defer stopPool()
	}
	srv := server.New(cfg)
	wd, err := os.Getwd()
	if err != nil {
		return fail("%v", err)
	}
	apply, err := mcpApply(wd)
	if err != nil {
		// The API serves without it: /mcp only keeps apply off.
		fmt.Fprintf(os.Stderr, "pinfold: /mcp offers no apply tool: pinfold.yaml: %v\n", err)
	}
	srv.Handle("/mcp", mcpHandler(srv, wd, cfg.Pinfold, apply, c.Version))
	if err := server.ServeLimited(ctx, srv, lim, ls...); err != nil {
		return fail("%v", err)
	}
	return 0
}

// pinfoldBinary finds pinfold, which supervises the sessions
// (PINFOLD_BINARY, beside this binary, on PATH: helper.Find).
func pinfoldBinary() (string, error) { return helper.Find("pinfold", "PINFOLD_BINARY") }

// startPool starts the kubernetes helper's pool keeper (pinfold-kube pool)
// and has the sessions this server starts claim its warm pods (their
// supervisors inherit PINFOLD_KUBE_POOL and PINFOLD_KUBE_POOL_SOCKET).
// The keeper ends when its stdin does: when stop closes it, or when this
// process is gone, however it ended; it deletes its pods as it ends.
func startPool(store string, size int) (stop func(), err error) {
	bin, err := helper.Find("pinfold-kube", "PINFOLD_KUBE_HELPER")
	if err != nil {
		return nil, fmt.Errorf("--kube-pool needs the kubernetes helper pinfold-kube: %v", err)
	}
	// Unique among the servers of a namespace: in a pod, this process is
	// pid 1 and the host name is the pod's.
	host, _ := os.Hostname()
	name := fmt.Sprintf("serve-%d-%s", os.Getpid(), host)
	sock := filepath.Join(store, "kube-pool.sock")
	cmd := exec.Command(bin, "pool", name, fmt.Sprint(size), sock)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// Not in the terminal's process group: Ctrl-C stops the server, which
	// then stops the keeper.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	os.Setenv("PINFOLD_KUBE_POOL", name)
	os.Setenv("PINFOLD_KUBE_POOL_SOCKET", sock)
	return func() {
		in.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
		}
	}, nil
}
