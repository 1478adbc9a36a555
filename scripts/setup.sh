#!/bin/sh
# Sets pinfold up on Debian 12 (as root): builds pinfold and the network
# helper it uses for --network outbound|allow and -p, and installs them in
# /usr/local/bin. It installs no package: a sandbox needs only the kernel.
#
#   scripts/setup.sh         pinfold and pinfold-net (what `pinfold run` needs)
#   scripts/setup.sh --all   also pinfold-api (serve), pinfold-pack (pack)
#                            and pinfold-kube with pinfold-agent
#                            (--backend kubernetes)
#
# What only the tests and benchmarks need (packages, the Kubernetes kit,
# cosign, the other helpers) is prepared by scripts/test.sh, through
# scripts/test-setup.sh.
set -eu
cd "$(dirname "$0")/.."

bins="pinfold pinfold-net"
case ${1:-} in
--all) bins="$bins pinfold-api pinfold-pack pinfold-kube pinfold-agent" ;;
"") ;;
*)
	echo "usage: scripts/setup.sh [--all]" >&2
	exit 2
	;;
esac

# The network modes outbound and allow give each sandbox a TUN device.
if [ ! -e /dev/net/tun ]; then
	modprobe tun 2>/dev/null || true
	[ -e /dev/net/tun ] || { mkdir -p /dev/net && mknod -m 0666 /dev/net/tun c 10 200; }
fi

# shellcheck disable=SC2086
./scripts/build.sh $bins
for b in $bins; do
	[ "$b" = pinfold ] && continue
	install -m 0755 "bin/$b" "/usr/local/bin/$b"
done
# pinfold last: a pinfold found on PATH has its helpers beside it.
install -m 0755 bin/pinfold /usr/local/bin/pinfold
echo "installed /usr/local/bin/pinfold ($(/usr/local/bin/pinfold version)) and$(for b in $bins; do [ "$b" = pinfold ] || printf ' %s' "$b"; done)"
