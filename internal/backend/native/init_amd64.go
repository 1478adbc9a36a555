package native

import (
	_ "embed"
	"slices"
	"unsafe"
)

// initBinary is initc/init.c built by initc/build.sh.
//
//go:embed init_amd64.bin
var initBinary []byte

// launcherSpawn is the init initc/launch.c (pre_spawn) started for a first
// run before the runtime did, written there before the runtime starts
// (entry_amd64.s passes its address); all zero when there is none. Its
// layout is launch.c's struct prespawn.
var launcherSpawn struct {
	sock, stage1, memfd int64
	msg                 *byte // the messages sent (M_SPAWN, then M_CONFIG if any), in a mapping of its own
	len                 int64
	// maxprocs is 1 when the launcher added GOMAXPROCS=1 to the
	// environment the runtime started with (launch.c: with_maxprocs).
	maxprocs int64
}

// launcherMaxprocs reports once whether the launcher added GOMAXPROCS=1
// to the environment, for the runtime alone: the caller takes it out.
func launcherMaxprocs() bool {
	l := &launcherSpawn
	added := l.maxprocs == 1
	l.maxprocs = 0
	return added
}

// launcherSpawned returns launcherSpawn's init once, the M_SPAWN message
// it was sent and the M_CONFIG message queued after it, if any (a config
// hint's); ok is false when there is none.
func launcherSpawned() (sock, stage1, memfd int, msg, cfg []byte, ok bool) {
	l := &launcherSpawn
	if l.sock <= 0 || l.stage1 <= 0 || l.msg == nil || l.len <= 0 {
		return 0, 0, 0, nil, nil, false
	}
	all := slices.Clone(unsafe.Slice(l.msg, l.len))
	sock, stage1, memfd = int(l.sock), int(l.stage1), int(l.memfd)
	l.sock, l.stage1, l.memfd, l.msg, l.len = 0, 0, 0, nil, 0
	msg, cfg = splitHint(all)
	return sock, stage1, memfd, msg, cfg, true
}
