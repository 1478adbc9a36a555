#!/bin/sh
# Installs what pinfold's build, tests and benchmarks need on Debian 12,
# builds pinfold, and installs it as /usr/local/bin/pinfold.
# Run as root. Packages come from the machine's configured apt mirror.
set -eu
cd "$(dirname "$0")/.."

export DEBIAN_FRONTEND=noninteractive
need=""
for pkg in gcc git e2fsprogs xz-utils zstd bzip2 iproute2 bubblewrap hyperfine podman uidmap slirp4netns passt debootstrap skopeo docker.io runc tini python3 docker-registry umoci openssl busybox-static squashfs-tools squashfuse; do
	dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need="$need $pkg"
done
if [ -n "$need" ]; then
	apt-get update -qq
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $need >/dev/null
fi

# The network modes outbound and allow give each sandbox a TUN device.
if [ ! -e /dev/net/tun ]; then
	modprobe tun 2>/dev/null || true
	[ -e /dev/net/tun ] || { mkdir -p /dev/net && mknod -m 0666 /dev/net/tun c 10 200; }
fi

. scripts/goenv.sh

# The kubernetes runtime's tests run on a real single-node cluster: the k8s
# kit (../shared/k8s beside the repository, or PINFOLD_K8S_KIT) builds its
# binaries once into K8S_KIT_CACHE (/var/cache/k8s-kit; keep it between CI
# runs: a cold build takes 7 to 12 minutes, a cached one under a second).
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
# the Go module proxy into /var/cache/pinfold-tools (keep it between CI
# runs: about five minutes cold). A failed build only makes that test skip.
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

./scripts/build.sh
install -m 0755 bin/pinfold-net /usr/local/bin/pinfold-net
install -m 0755 bin/pinfold-api /usr/local/bin/pinfold-api
install -m 0755 bin/pinfold-pack /usr/local/bin/pinfold-pack
install -m 0755 bin/pinfold-kube /usr/local/bin/pinfold-kube
install -m 0755 bin/pinfold /usr/local/bin/pinfold
echo "installed /usr/local/bin/pinfold ($(/usr/local/bin/pinfold version))"
