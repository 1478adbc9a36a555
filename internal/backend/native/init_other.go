//go:build !amd64

package native

// initBinary is empty where no init is built; Start reports ErrUnsupported.
var initBinary []byte
