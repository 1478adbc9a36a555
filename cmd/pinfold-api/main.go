// Command pinfold-api is pinfold's HTTP API server (pinfold serve runs
// it) and client (pinfold's session commands run it with PINFOLD_HOST
// set): a helper binary, like pinfold-net, so that net/http and the
// WebSocket library stay out of pinfold's own start-up.
//
//	pinfold-api serve [--socket PATH] [--listen ADDR --tokens FILE [--policy FILE]] [--max-upload BYTES] [--max-body BYTES] [--kube-pool N]
//	                  [--max-conns N] [--header-timeout D] [--body-timeout D] [--write-timeout D] [--idle-timeout D]
//	pinfold-api client session|exec|shell ARGS...
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/pinfold/pinfold/client"
	"github.com/pinfold/pinfold/internal/helper"
	"github.com/pinfold/pinfold/internal/server"
	"github.com/pinfold/pinfold/internal/store"
)

func main() {
	if len(os.Args) >= 2 && os.Args[1] == "client" {
		os.Exit(clientMain(os.Args[2:]))
	}
	if len(os.Args) < 2 || os.Args[1] != "serve" {
		fmt.Fprintln(os.Stderr, "usage: pinfold-api serve [--socket PATH] [--listen ADDR --tokens FILE [--policy FILE]] [--max-upload BYTES] [--max-body BYTES]")
		os.Exit(125)
	}
	os.Exit(serve(os.Args[2:]))
}

func serve(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	sock := fs.String("socket", "", "unix socket (default STORE/api.sock)")
	listen := fs.String("listen", "", "also listen on this TCP address (needs --tokens)")
	tokens := fs.String("tokens", "", "file of TENANT TOKEN lines for TCP clients (mode 600)")
	policy := fs.String("policy", "", "the operator's policy file: what tenants may ask for (JSON; default: the safe defaults of docs/api.md)")
	maxUpload := fs.Int64("max-upload", server.DefaultMaxUpload, "largest file upload, in bytes")
	maxBody := fs.Int64("max-body", server.DefaultMaxBody, "largest JSON request body, in bytes")
	version := fs.String("version", "dev", "version to report")
	kubePool := fs.Int("kube-pool", 0, "keep this many warm pods of every kubernetes session template")
	var lim server.Bounds
	fs.IntVar(&lim.MaxConns, "max-conns", server.DefaultMaxConns, "connections served at once on each listener; more wait")
	fs.DurationVar(&lim.HeaderTimeout, "header-timeout", server.DefaultHeaderTimeout, "longest wait for a request's head")
	fs.DurationVar(&lim.BodyTimeout, "body-timeout", server.DefaultBodyTimeout, "longest wait for a JSON body (uploads: more, by size)")
	fs.DurationVar(&lim.WriteTimeout, "write-timeout", server.DefaultWriteTimeout, "longest wait for a client to take each write of an answer")
	fs.DurationVar(&lim.IdleTimeout, "idle-timeout", server.DefaultIdleTimeout, "longest wait for the next request on a kept-alive connection")
	if err := fs.Parse(args); err != nil {
		return 125
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "pinfold: "+client.CodeAPI+" "+format+"\n", a...)
		return 125
	}
	if lim.MaxConns <= 0 || lim.HeaderTimeout <= 0 || lim.BodyTimeout <= 0 || lim.WriteTimeout <= 0 || lim.IdleTimeout <= 0 {
		return fail("--max-conns and the timeouts must be above zero: nothing is unbounded")
	}
	dir, err := store.DefaultDir()
	if err != nil {
		return fail("%v", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fail("%v", err)
	}
	cfg := server.Config{Store: dir, Version: *version, MaxUpload: *maxUpload, MaxBody: *maxBody}
	if cfg.Pinfold, err = pinfoldBinary(); err != nil {
		return fail("%v", err)
	}
	if *listen != "" {
		if *tokens == "" {
			return fail("--listen needs --tokens: no request is served on TCP without a token")
		}
		if cfg.Tokens, err = server.ReadTokens(*tokens); err != nil {
			return fail("%v", err)
		}
	}
	if *policy != "" {
		if cfg.Policy, err = server.ReadPolicy(*policy); err != nil {
			return fail("the policy file: %v", err)
		}
	}
	if *sock == "" {
		*sock = server.DefaultSocket(dir)
	}
	ul, err := server.ListenUnix(*sock)
	if err != nil {
		return fail("%v", err)
	}
	defer os.Remove(*sock)
	ls := []net.Listener{ul}
	fmt.Fprintf(os.Stderr, "pinfold: serving on unix:%s", *sock)
	if *listen != "" {
		tl, err := net.Listen("tcp", *listen)
		if err != nil {
			return fail("%v", err)
		}
		ls = append(ls, tl)
		fmt.Fprintf(os.Stderr, " and http://%s", tl.Addr())
	}
	fmt.Fprintln(os.Stderr)
	// Tenants' workspaces are fresh directories of TENANTS/T: the
	// kubernetes runtime mounts T's directory in their pods, so that one
	// warm pod serves any of T's sessions.
	os.Setenv("PINFOLD_KUBE_TENANTS", server.TenantsDir(dir))
	if *kubePool > 0 {
		stopPool, err := startPool(dir, *kubePool)
		if err != nil {
			return fail("%v", err)
		}
		defer stopPool()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	signal.Ignore(syscall.SIGPIPE, syscall.SIGHUP)
	if err := server.ServeLimited(ctx, server.New(cfg), lim, ls...); err != nil {
		return fail("%v", err)
	}
	return 0
}

// pinfoldBinary finds pinfold, which supervises the sessions: beside this
// binary, else on PATH (PINFOLD_BINARY overrides).
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
