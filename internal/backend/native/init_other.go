//go:build !amd64

package native

// initBinary is empty where no init is built; Start reports ErrUnsupported.
var initBinary []byte

// launcherSpawned: only the amd64 launcher pre-spawns an init.
func launcherSpawned() (sock, stage1, memfd int, msg, cfg []byte, ok bool) {
	return 0, 0, 0, nil, nil, false
}

// launcherMaxprocs: only the amd64 launcher sets GOMAXPROCS.
func launcherMaxprocs() bool { return false }
