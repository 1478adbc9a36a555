package apihelper

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/pflag"

	"github.com/pinfold/pinfold/internal/config"
	"github.com/pinfold/pinfold/internal/mcpserver"
	"github.com/pinfold/pinfold/internal/server"
	"github.com/pinfold/pinfold/internal/store"
)

// mcpMain serves pinfold's MCP tools on stdin and stdout, as the store's
// owner, with sessions in the workspace (--workspace, else the current
// directory) under its pinfold.yaml.
func mcpMain(args []string) int {
	fs := pflag.NewFlagSet("mcp", pflag.ContinueOnError)
	ws := fs.String("workspace", "", "the workspace sessions start in (default: the current directory)")
	version := fs.String("version", "", "pinfold's version")
	if err := fs.Parse(args); err != nil {
		return 125
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "pinfold: PF194 "+format+"\n", a...)
		return 125
	}
	if fs.NArg() > 0 {
		return fail("pinfold mcp takes no arguments")
	}
	dir := *ws
	if dir == "" {
		dir = "."
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return fail("%v", err)
	}
	apply, err := mcpApply(dir)
	if err != nil {
		return fail("%v", err)
	}
	bin, err := pinfoldBinary()
	if err != nil {
		return fail("%v", err)
	}
	srv, err := localServer(*version, bin)
	if err != nil {
		return fail("%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	signal.Ignore(syscall.SIGPIPE, syscall.SIGHUP)
	s := mcpserver.New(mcpserver.Config{API: srv.AsTenant(""), Workspace: dir, Apply: apply, Version: *version, Pinfold: bin})
	// stdout is the protocol's: the server writes its notes on stderr.
	if err := s.Run(ctx, &mcp.StdioTransport{}); err != nil && ctx.Err() == nil {
		return fail("%v", err)
	}
	return 0
}

// localServer is the API served in this process to its owner.
func localServer(version, pinfold string) (*server.Server, error) {
	dir, err := store.DefaultDir()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return server.New(server.Config{Store: dir, Version: version, Pinfold: pinfold}), nil
}

// mcpApply says whether the pinfold.yaml that governs dir (found as a
// run finds it) offers the apply and discard tools (mcp: {apply: true}).
func mcpApply(dir string) (bool, error) {
	d, err := config.Discover(dir)
	if err != nil || d.Path == "" {
		return false, err
	}
	f, err := config.LoadDiscovered(d.Path)
	if err != nil {
		return false, err
	}
	return f.MCP != nil && f.MCP.Apply, nil
}

// mcpHandler is serve's /mcp: MCP over streamable HTTP, behind the
// server's authentication. It is stateless: every request gets a server
// of its own for the tenant it was authenticated as, so that no MCP
// session id can carry one tenant's requests into another's tools. The
// owner's sessions and runs start in dir (serve's working directory),
// whose pinfold.yaml says whether apply and discard are offered.
func mcpHandler(srv *server.Server, dir, pinfold string, apply bool, version string) http.Handler {
	return mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		t, ok := server.Tenant(r)
		if !ok {
			return nil // not authenticated: the SDK answers 400
		}
		c := mcpserver.Config{API: srv.AsTenant(t), Apply: apply, Version: version}
		if t == "" {
			c.Workspace, c.Pinfold = dir, pinfold
		}
		return mcpserver.New(c)
	}, &mcp.StreamableHTTPOptions{Stateless: true,
		// The SDK's check of the Host header guards servers that trust
		// whoever reaches localhost (DNS rebinding); here every TCP request
		// needs a token a browser does not have, and the check would
		// refuse a serve on loopback behind a reverse proxy.
		DisableLocalhostProtection: true})
}
