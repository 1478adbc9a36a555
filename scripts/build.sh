#!/bin/sh
# Builds pinfold and its helper binaries into bin/: static, without cgo
# (the sandbox init is embedded, see internal/backend/native/initc), and
# pinfold on amd64 entered through the launch cache (-E pinfold_entry: a
# repeated `pinfold run` starts without the Go runtime, see
# internal/backend/native/initc/launch.c).
#
#   scripts/build.sh                 every binary
#   scripts/build.sh pinfold pinfold-net ...   only those
#   GOOS=darwin GOARCH=arm64 scripts/build.sh pinfold pinfold-api
#                                    into bin/darwin_arm64/: pinfold for
#                                    macOS or Windows, a client of a
#                                    pinfold server (docs/cli.md)
#
# The helpers keep heavy libraries out of pinfold's own start-up:
# pinfold-net (gVisor's netstack, for --network outbound|allow and -p),
# pinfold-api (net/http and WebSocket, for pinfold serve), pinfold-pack
# (go-containerregistry, for pinfold pack) and pinfold-kube (client-go,
# for --backend kubernetes). pinfold-agent is a session's agent alone,
# which pinfold-kube copies into a cold session's pod (smaller than
# pinfold, so quicker to copy; without it, pinfold is copied).
set -eu
cd "$(dirname "$0")/.."
. scripts/goenv.sh
[ $# -gt 0 ] || set -- pinfold pinfold-net pinfold-api pinfold-pack pinfold-kube pinfold-agent
# Built for another system (GOOS, GOARCH), they go to bin/GOOS_GOARCH/.
out=bin
if [ "$(go env GOOS)/$(go env GOARCH)" != "$(go env GOHOSTOS)/$(go env GOHOSTARCH)" ]; then
	out=bin/$(go env GOOS)_$(go env GOARCH)
fi
mkdir -p "$out"
exe=$(go env GOEXE)
for b in "$@"; do
	case $b in
	pinfold)
		version=$(git describe --always --dirty 2>/dev/null || echo dev)
		ldflags="-s -w -X github.com/pinfold/pinfold/internal/cli.Version=$version -X github.com/pinfold/pinfold/internal/remote.Version=$version"
		if [ "$(go env GOOS)/$(go env GOARCH)" = linux/amd64 ]; then
			ldflags="$ldflags -E pinfold_entry"
		fi
		CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/pinfold$exe" ./cmd/pinfold
		;;
	pinfold-net | pinfold-api | pinfold-pack | pinfold-kube | pinfold-agent)
		CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/$b$exe" "./cmd/$b"
		;;
	*)
		echo "build.sh: no binary $b (pinfold, pinfold-net, pinfold-api, pinfold-pack, pinfold-kube, pinfold-agent)" >&2
		exit 2
		;;
	esac
done
