# Sourced by the other scripts: finds a Go toolchain (1.26 or newer).
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	PATH=/usr/local/go/bin:$PATH
	export PATH
fi
if ! command -v go >/dev/null 2>&1; then
	echo "pinfold needs Go 1.26 or newer (expected at /usr/local/go)" >&2
	exit 1
fi
