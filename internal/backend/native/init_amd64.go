package native

import _ "embed"

// initBinary is initc/init.c built by initc/build.sh.
//
//go:embed init_amd64.bin
var initBinary []byte
