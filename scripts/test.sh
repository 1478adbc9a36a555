#!/bin/sh
# Runs every check and test. As root (as in CI) the privileged tests run
# too: real sandboxes, cgroup limits, other users, kill -9.
set -eu
cd "$(dirname "$0")/.."
. scripts/goenv.sh

echo "== gofmt"
bad=$(gofmt -l $(git ls-files '*.go'))
[ -z "$bad" ] || { echo "gofmt needed:"; echo "$bad"; exit 1; }

echo "== go vet"
go vet ./...

echo "== the embedded init matches its source"
if command -v gcc >/dev/null 2>&1; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	cp -r internal/backend/native/initc "$tmp/initc"
	sh "$tmp/initc/build.sh"
	cmp "$tmp/init_amd64.bin" internal/backend/native/init_amd64.bin || {
		echo "internal/backend/native/init_amd64.bin is stale: run go generate ./internal/backend/native/"
		exit 1
	}
else
	echo "(skipped: no gcc)"
fi

echo "== go test"
CGO_ENABLED=0 go test -count=1 -timeout 20m ./...
