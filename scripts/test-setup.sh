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
