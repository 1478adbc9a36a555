// Package landlock holds what pinfold knows of the kernel's Landlock LSM:
// the ABI version this kernel has, the access rights each version handles,
// and the switch that turns the layer off. The native runtime's init
// applies the ruleset (internal/backend/native); this package only says
// which rights there are.
package landlock

import (
	"os"
	"strconv"
)

// Filesystem access rights (LANDLOCK_ACCESS_FS_*), by the ABI that added them.
const (
	Execute    uint64 = 1 << 0
	WriteFile  uint64 = 1 << 1
	ReadFile   uint64 = 1 << 2
	ReadDir    uint64 = 1 << 3
	RemoveDir  uint64 = 1 << 4
	RemoveFile uint64 = 1 << 5
	MakeChar   uint64 = 1 << 6
	MakeDir    uint64 = 1 << 7
	MakeReg    uint64 = 1 << 8
	MakeSock   uint64 = 1 << 9
	MakeFifo   uint64 = 1 << 10
	MakeBlock  uint64 = 1 << 11
	MakeSym    uint64 = 1 << 12
	Refer      uint64 = 1 << 13 // ABI 2
	Truncate   uint64 = 1 << 14 // ABI 3
	IoctlDev   uint64 = 1 << 15 // ABI 5
)

// Network access rights (LANDLOCK_ACCESS_NET_*, ABI 4).
const (
	BindTCP    uint64 = 1 << 0
	ConnectTCP uint64 = 1 << 1
)

// Read is what a path the plan exposes grants: read, list and execute.
const Read = Execute | ReadFile | ReadDir

// Write is what a path the plan lets the command write adds to Read.
const Write = WriteFile | RemoveDir | RemoveFile | MakeChar | MakeDir | MakeReg | MakeSock |
	MakeFifo | MakeBlock | MakeSym | Refer | Truncate | IoctlDev

// HandledFS is every filesystem right ABI version abi knows: all are
// denied unless a rule grants them.
func HandledFS(abi int) uint64 {
	switch {
	case abi < 1:
		return 0
	case abi == 1:
		return Refer - 1
	case abi == 2:
		return Truncate - 1
	case abi < 5:
		return IoctlDev - 1
	}
	return IoctlDev<<1 - 1
}

// HandledNet is the network rights ABI version abi knows (TCP bind and
// connect from ABI 4).
func HandledNet(abi int) uint64 {
	if abi < 4 {
		return 0
	}
	return BindTCP | ConnectTCP
}

// Env is the switch: PINFOLD_LANDLOCK=0 leaves Landlock out of the
// sandboxes this process starts (for comparisons; see docs/security.md).
const Env = "PINFOLD_LANDLOCK"

// Disabled reports whether Env turns the layer off.
func Disabled() bool { return os.Getenv(Env) == "0" }

// MinABI is the oldest ABI the sandboxes use: ABI 1 refuses every rename
// or link between directories (it cannot tell which are allowed), which
// would break ordinary commands (mv) in the workspace.
const MinABI = 2

// Active returns the ABI version the native runtime's sandboxes use: the
// kernel's, or 0 when it has no usable Landlock or Env turns it off.
func Active() int {
	if Disabled() || ABI() < MinABI {
		return 0
	}
	return ABI()
}

// Status names the layer as doctor and pinfold plan show it: "landlock
// (ABI 7)", or why there is none.
func Status() string {
	switch {
	case Disabled():
		return "no landlock (" + Env + "=0)"
	case ABI() == 0:
		return "no landlock (the kernel has none)"
	case ABI() < MinABI:
		return "no landlock (the kernel's ABI " + strconv.Itoa(ABI()) + " cannot allow renames; 2 or later is used)"
	}
	return "landlock (ABI " + strconv.Itoa(ABI()) + ")"
}

// Layers are the native runtime's layers of isolation on this host:
// namespaces and seccomp always, Landlock where the kernel has it.
func Layers() []string { return []string{"namespaces", "seccomp", Status()} }
