package landlock

import (
	"sync"

	"golang.org/x/sys/unix"
)

var abi = sync.OnceValue(func() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(v)
})

// ABI returns the kernel's Landlock ABI version, 0 without Landlock (not
// built in, or not enabled at boot).
func ABI() int { return abi() }
