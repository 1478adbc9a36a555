#!/bin/sh
# Runs every check and test. As root (as in CI) it first prepares what
# only the tests need (scripts/test-setup.sh: packages, the Kubernetes kit,
# cosign, every helper binary), and the privileged tests run too: real
# sandboxes, cgroup limits, other users, kill -9.
set -eu
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ]; then
	echo "== preparing what the tests need"
	./scripts/test-setup.sh
else
	echo "(not root: nothing installed, and the privileged tests skip)"
fi
. scripts/goenv.sh

echo "== gofmt"
bad=$(gofmt -l $(git ls-files '*.go'))
[ -z "$bad" ] || { echo "gofmt needed:"; echo "$bad"; exit 1; }

echo "== go vet"
go vet ./...

echo "== the CLI builds for other systems (as a client of a remote server)"
for p in darwin/amd64 darwin/arm64 windows/amd64 windows/arm64; do
	for c in ./cmd/pinfold ./cmd/pinfold-api; do
		GOOS=${p%/*} GOARCH=${p#*/} CGO_ENABLED=0 go build -o /dev/null "$c" || exit 1
	done
done
for p in darwin/arm64 windows/amd64; do
	GOOS=${p%/*} GOARCH=${p#*/} CGO_ENABLED=0 go vet ./cmd/pinfold ./cmd/pinfold-api ./internal/apihelper ./internal/remote || exit 1
done

echo "== the embedded init and launcher match their source"
if command -v gcc >/dev/null 2>&1; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	cp -r internal/backend/native/initc "$tmp/initc"
	sh "$tmp/initc/build.sh"
	for f in init_amd64.bin launch_amd64.s; do
		cmp "$tmp/$f" "internal/backend/native/$f" || {
			echo "internal/backend/native/$f is stale: run go generate ./internal/backend/native/"
			exit 1
		}
	done
else
	echo "(skipped: no gcc)"
fi

echo "== go test"
CGO_ENABLED=0 go test -count=1 -timeout 20m ./...

# Fuzzing is bounded by a count of inputs, not a time: with -fuzztime
# as a time, Go (before 1.27, golang/go#75804) may fail a run that found
# nothing with "context deadline exceeded" as the time runs out, more
# often on a loaded machine. Each count is 5-30 s of inputs on a loaded
# 2-core machine, a few seconds on an idle one.
echo "== fuzz: the network guard against net/http's parser (bounded)"
CGO_ENABLED=0 go test -run '^$' -fuzz '^FuzzGuardVsNetHTTP$' -fuzztime 500000x ./internal/netpolicy/

echo "== fuzz: what comes from outside (bounded: a count of inputs each)"
# Images and app files from anyone, tenants' requests, and the wire
# messages of the agent and the kubernetes and network helpers.
# FuzzOpenArchive, FuzzReadArchive and FuzzReadAppRoot run on their seeds
# in go test only: under -fuzz some of their inputs take seconds each; see
# docs/architecture.md.
for t in \
	FuzzOpenLayout:./internal/oci/:60000 \
	FuzzTenantCreate:./internal/server/:10000 FuzzTenantRoutes:./internal/server/:150000 \
	FuzzE2BRoutes:./internal/server/:50000 \
	FuzzRequest:./internal/agent/:600000 FuzzFrames:./internal/agent/:600000 \
	FuzzWire:./internal/kube/:800000 FuzzHelperMessage:./internal/netpolicy/:500000; do
	name=${t%%:*} rest=${t#*:}
	CGO_ENABLED=0 go test -run '^$' -fuzz "^$name\$" -fuzztime "${rest#*:}x" "${rest%%:*}"
done
