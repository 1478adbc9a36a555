package cli

import (
	"context"
	"os"
	"syscall"

	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/helper"
	"github.com/pinfold/pinfold/internal/serveconf"
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
			c := serveconf.Default()
			c.Flags(fs.fs, false)
			return func(ctx context.Context, io *IO, args []string) int {
				if len(args) > 0 {
					return fail(io, fs.errorf("pinfold serve takes no arguments"))
				}
				return execAPI(io, append([]string{"serve", "--version", Version}, serveconf.Args(fs.fs)...)...)
			}
		}}
}
