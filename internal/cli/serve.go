package cli

import (
	"context"
	"os"
	"syscall"

	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/helper"
)

// apiHelper is pinfold-api, which holds the HTTP server and client so
// that this binary links neither: $PINFOLD_API_HELPER, else beside this
// binary, else on PATH.
func apiHelper() (string, error) {
	if p, err := helper.Find("pinfold-api", "PINFOLD_API_HELPER"); err == nil {
		return p, nil
	}
	return "", fault.New(fault.API, "pinfold-api is missing", "pinfold serve and PINFOLD_HOST need the API helper",
		"install it next to pinfold (scripts/setup.sh --all does), or set PINFOLD_API_HELPER", nil)
}

// execAPI replaces pinfold with pinfold-api ARGS.
func execAPI(io *IO, args ...string) int {
	p, err := apiHelper()
	if err != nil {
		return fail(io, err)
	}
	err = syscall.Exec(p, append([]string{"pinfold-api"}, args...), os.Environ())
	return fail(io, fault.New(fault.API, "cannot run "+p, err.Error(), "", err))
}

func serveCommand() command {
	return command{name: "serve", summary: "serve the HTTP API for sessions", use: "serve [flags]",
		long: `Serves pinfold's HTTP API (api/openapi.yaml, docs/api.md): sandboxes that stay
up, exec with streamed output, files, changesets, ports. It listens on an
owner-only unix socket (default STORE/api.sock) and, with --listen, on TCP,
where every request needs a bearer token of the --tokens file (one
"TENANT TOKEN" a line, mode 600); a tenant sees only its own sandboxes and
gets only what the operator's --policy file grants (safe defaults without).
Sessions outlive the server.`,
		setup: func(fs *flagSet) runner {
			var sock, listen, tokens, policy, maxUpload, maxBody, kubePool string
			var maxConns, headerTimeout, bodyTimeout, writeTimeout, idleTimeout string
			fs.String(&sock, "socket", 0, "PATH", "unix socket (default: STORE/api.sock)")
			fs.String(&listen, "listen", 0, "ADDR", "also listen on this TCP address (needs --tokens)")
			fs.String(&tokens, "tokens", 0, "FILE", "TENANT TOKEN lines for TCP clients (mode 600)")
			fs.String(&policy, "policy", 0, "FILE", "what tenants may ask for: bases, backends, networks, ports, limits (docs/api.md)")
			fs.String(&maxUpload, "max-upload", 0, "BYTES", "largest file upload (default 64 MiB)")
			fs.String(&maxBody, "max-body", 0, "BYTES", "largest JSON request body (default 1 MiB)")
			fs.String(&kubePool, "kube-pool", 0, "N", "keep N warm pods of every kubernetes session template (docs/kubernetes.md)")
			fs.String(&maxConns, "max-conns", 0, "N", "connections served at once on each listener; more wait (default 256)")
			fs.String(&headerTimeout, "header-timeout", 0, "D", "longest wait for a request's head (default 10s)")
			fs.String(&bodyTimeout, "body-timeout", 0, "D", "longest wait for a JSON body; uploads get more, by size (default 30s)")
			fs.String(&writeTimeout, "write-timeout", 0, "D", "longest wait for a client to take each write of an answer (default 30s)")
			fs.String(&idleTimeout, "idle-timeout", 0, "D", "longest wait for the next request on a kept-alive connection (default 60s)")
			return func(ctx context.Context, io *IO, args []string) int {
				if len(args) > 0 {
					return fail(io, fs.errorf("pinfold serve takes no arguments"))
				}
				a := []string{"serve", "--version", Version}
				for _, f := range []struct{ name, v string }{{"--socket", sock}, {"--listen", listen}, {"--tokens", tokens}, {"--policy", policy},
					{"--max-upload", maxUpload}, {"--max-body", maxBody}, {"--kube-pool", kubePool}, {"--max-conns", maxConns},
					{"--header-timeout", headerTimeout}, {"--body-timeout", bodyTimeout}, {"--write-timeout", writeTimeout},
					{"--idle-timeout", idleTimeout}} {
					if f.v != "" {
						a = append(a, f.name, f.v)
					}
				}
				return execAPI(io, a...)
			}
		}}
}
