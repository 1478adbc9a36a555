#!/bin/sh
# Prepares what pinfold's tests and benchmarks need on Debian 12, as root
# (scripts/test.sh runs it): the packages they use (from the machine's
# configured apt mirror), the Kubernetes kit's cluster binaries, cosign,
# and every pinfold binary installed in /usr/local/bin. Each step is
# cached: a second run takes seconds.
set -eu
cd "$(dirname "$0")/.."

export DEBIAN_FRONTEND=noninteractive
need=""
for pkg in gcc git e2fsprogs xz-utils zstd bzip2 iproute2 bubblewrap hyperfine podman uidmap slirp4netns passt debootstrap skopeo docker.io runc tini python3 docker-registry umoci openssl busybox-static squashfs-tools squashfuse; do
	dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need="$need $pkg"
done
if [ -n "$need" ]; then
	echo "installing packages:$need"
	apt-get update -qq
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $need >/dev/null
fi

. scripts/goenv.sh

# The kubernetes runtime's tests run on a real single-node cluster: the k8s
# kit (../shared/k8s beside the repository, or PINFOLD_K8S_KIT) builds its
# binaries once into K8S_KIT_CACHE (/var/cache/k8s-kit; keep it between
# runs: a cold build takes 7 to 16 minutes, a cached one under a second).
# The test brings the cluster up and down itself.
kit=${PINFOLD_K8S_KIT:-../shared/k8s}
if [ -x "$kit/build.sh" ]; then
	log=$(mktemp)
	if ! "$kit/build.sh" >"$log" 2>&1; then
		tail -n 40 "$log"
		rm -f "$log"
		echo "the k8s kit's build failed ($kit/build.sh)"
		exit 1
	fi
	tail -n 2 "$log"
	rm -f "$log"
fi

# cosign, for the test that checks pack's signatures against it
# (TestCosignInterop): no Debian package has it, so it is built once from
# the Go module proxy into /var/cache/pinfold-tools (keep it between runs:
# about five minutes cold). A failed build only makes that test skip.
tools=/var/cache/pinfold-tools
if [ ! -x "$tools/cosign" ]; then
	mkdir -p "$tools"
	log=$(mktemp)
	if GOBIN="$tools" go install github.com/sigstore/cosign/v2/cmd/cosign@v2.6.5 >"$log" 2>&1; then
		echo "built $tools/cosign"
	else
		tail -n 5 "$log"
		echo "warning: could not build cosign; TestCosignInterop will skip"
	fi
	rm -f "$log"
fi

# The official TypeScript MCP SDK's client, for TestTypeScriptClient
# (internal/mcpserver): node and npm from Debian if missing, the SDK from
# the npm registry npm is configured with, pinned, into
# /var/cache/pinfold-tools/mcp-ts (kept between runs). The test fails
# under CI=true without it.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
mcpts=$tools/mcp-ts
mcpsdk=1.32.2
if ! grep -qs "\"version\": \"$mcpsdk\"" "$mcpts/node_modules/@modelcontextprotocol/sdk/package.json"; then
	mkdir -p "$mcpts"
	log=$(mktemp)
	if npm install --prefix "$mcpts" --no-audit --no-fund "@modelcontextprotocol/sdk@$mcpsdk" >"$log" 2>&1; then
		echo "installed @modelcontextprotocol/sdk@$mcpsdk in $mcpts"
	else
		tail -n 5 "$log"
		echo "warning: could not install @modelcontextprotocol/sdk; TestTypeScriptClient fails under CI=true"
	fi
	rm -f "$log"
fi

# E2B's SDK, for the test that runs it unmodified against pinfold serve
# (TestE2BSDK, TestE2BLoad in client/e2b_test.go): node and npm as
# above, and e2b@2.51.0 from the npm registry the machine is
# configured with, once, into $tools/e2b-node. On CI a missing SDK fails
# those tests.
e2b=$tools/e2b-node
if [ "$(cat "$e2b/node_modules/e2b/package.json" 2>/dev/null | grep -o '"version": *"[^"]*"' | head -n 1)" != '"version": "2.51.0"' ]; then
	mkdir -p "$e2b"
	log=$(mktemp)
	if npm install --prefix "$e2b" --no-audit --no-fund e2b@2.51.0 >"$log" 2>&1; then
		echo "installed e2b@2.51.0 in $e2b"
	else
		tail -n 5 "$log"
		echo "warning: could not install e2b@2.51.0; the E2B tests will fail on CI"
	fi
	rm -f "$log"
fi

# runsc, gVisor's runtime, for the gvisor backend's tests (its conformance
# target and sandbox/gvisor, which fail without it on CI) and benchmarks:
# built once from the gVisor module pinfold's go.mod pins (the version
# pinfold-net's netstack comes from) into /var/cache/pinfold-tools (about
# a minute and a half cold), and linked beside pinfold in /usr/local/bin,
# where pinfold finds it.
runsc_version=$(awk '$1 == "gvisor.dev/gvisor" { print $2 }' go.mod)
if [ ! -x "$tools/runsc" ] || [ "$(cat "$tools/runsc.version" 2>/dev/null)" != "$runsc_version" ]; then
	mkdir -p "$tools"
	log=$(mktemp)
	if ! CGO_ENABLED=0 GOBIN="$tools" go install "gvisor.dev/gvisor/runsc@$runsc_version" >"$log" 2>&1; then
		tail -n 20 "$log"
		rm -f "$log"
		echo "could not build runsc $runsc_version"
		exit 1
	fi
	rm -f "$log"
	echo "$runsc_version" >"$tools/runsc.version"
	echo "built $tools/runsc ($runsc_version)"
fi

# The docker tests start a dockerd of their own (internal/conformance);
# the benchmarks need the machine's: see docs/backends.md.
./scripts/setup.sh --all
# pinfold finds runsc beside itself (the gvisor backend).
ln -sf "$tools/runsc" /usr/local/bin/runsc
