#!/bin/sh
# Builds bin/pinfold and its helpers bin/pinfold-net and bin/pinfold-pack:
# static, without cgo (the sandbox init is embedded, see
# internal/backend/native/initc), and on amd64 entered through the launch
# cache (-E pinfold_entry: a repeated `pinfold run` starts without the Go
# runtime, see internal/backend/native/initc/launch.c).
set -eu
cd "$(dirname "$0")/.."
. scripts/goenv.sh
ldflags="-s -w -X github.com/pinfold/pinfold/internal/cli.Version=$(git describe --always --dirty 2>/dev/null || echo dev)"
if [ "$(go env GOARCH)" = amd64 ]; then
	ldflags="$ldflags -E pinfold_entry"
fi
mkdir -p bin
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o bin/pinfold ./cmd/pinfold
# The network helper (gVisor's netstack), kept out of pinfold's own start.
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o bin/pinfold-net ./cmd/pinfold-net
# The API server and client (net/http, WebSocket), kept out of pinfold's own start.
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o bin/pinfold-api ./cmd/pinfold-api
# The image writer (go-containerregistry) for pinfold pack, kept out of
# pinfold's own start too.
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o bin/pinfold-pack ./cmd/pinfold-pack
# The Kubernetes helper (client-go), kept out of pinfold's own start.
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o bin/pinfold-kube ./cmd/pinfold-kube
