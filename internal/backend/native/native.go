// Package native runs pinfold's own sandbox: the supervisor side of a small
// init program (written in C without a C library, in initc/, embedded as
// init_amd64.bin) that builds the sandbox and runs one command in it.
//
// The caller describes a sandbox as a Config: namespaces, id maps, cgroups,
// and a list of Ops the init executes to build the root filesystem. Start
// executes the init from a sealed memfd and hands it the Config; Exec
// starts the command; Wait reports how it ended. The package knows nothing
// of workspaces or bases: the sandbox package lowers its Spec into a Config.
//
// Process model (see initc/init.c): stage 1 of the init runs in the host's
// namespaces and exits once stage 2, the sandbox's PID 1, is set up; stage 2
// is a child of the supervisor, so the supervisor waits for it and signals
// it directly, and the kernel kills it when the supervisor dies.
package native

import "fmt"

//go:generate sh initc/build.sh

// Op kinds, flags, message types and record tags mirror initc/proto.h.
const (
	OpMkdir   = 1
	OpMkfile  = 2
	OpSymlink = 3
	OpMount   = 4
	OpBind    = 5
	OpIDMap   = 6
	OpMask    = 7
	OpChmod   = 8
	OpSetattr = 9
	OpUmount  = 10
	OpRmdir   = 11
	// OpFuse mounts a squashfs image file through squashfuse, served from
	// inside the sandbox: A is the file, B the mount point, C squashfuse,
	// D the file's identity and the image's offset ([FuseIdentity]).
	OpFuse = 12

	// OpHostSource marks Op.A as a path on the host.
	OpHostSource = 1
	// OpOptional skips a bind whose source does not exist.
	OpOptional = 2
	// OpNoIDMap makes an OpIDMap op only clone its source (as the host
	// sees the path, which the sandbox's ids may not be able to reach).
	OpNoIDMap = 4
)

const (
	msgSpawn   = 3
	msgConfig  = 1
	msgExec    = 2
	msgPID     = 10
	msgReady   = 11
	msgPTY     = 12
	msgStarted = 13
	msgExit    = 14
	msgError   = 15
	msgTUN     = 16

	exitTmpFull = 1
)

const (
	cNSFlags    = 1
	cUIDMap     = 2
	cGIDMap     = 3
	cSetgroups  = 4
	cCgroup     = 5
	cIDMap      = 6
	cOp         = 7
	cHostname   = 8
	cScratch    = 9
	cLoUp       = 10
	cSeccomp    = 11
	cCaps       = 12
	cRlimit     = 13
	cUser       = 14
	cGroups     = 15
	cInitID     = 16
	cRootRO     = 17
	cTmpCheck   = 18
	cCapLast    = 19
	cNNP        = 20
	cTrace      = 21
	cTUN        = 22
	cLandlock   = 23
	cLLRule     = 24
	cNoMPTCP    = 25
	cCgroupSelf = 40 // C_CGSELF

	tunRoute4 = 1
	tunAddr6  = 2
	tunRoute6 = 4

	eArg    = 1
	eEnv    = 2
	eCwd    = 3
	eTTY    = 4
	eFDs    = 5
	eSetsid = 6
)

// Op is one step of building the root. Paths in B are inside the new root;
// A is a source (a host path when Flags has OpHostSource), a symlink target,
// or file content. What describes the step for error messages.
type Op struct {
	Kind       uint32
	Flags      uint32
	MountFlags uint64 // MS_* for OpMount and OpBind (MS_REC)
	Attr       uint64 // MOUNT_ATTR_* set recursively after a bind or idmap
	Mode       uint32
	A, B, C, D string
	What       string
}

// ID is a uid/gid pair.
type ID struct{ UID, GID uint32 }

// Rlimit is one resource limit applied to the command.
type Rlimit struct {
	Resource uint32
	Cur, Max uint64
}

// SpawnConfig is what the init needs to create a sandbox's namespaces: sent
// first, so that this work overlaps with the supervisor preparing Config.
type SpawnConfig struct {
	Namespaces    uint64 // CLONE_NEW* flags
	UIDMap        string // uid_map contents for the sandbox user namespace
	GIDMap        string
	SetgroupsDeny bool // unprivileged supervisors must deny setgroups
	InitID        *ID  // ids the init switches to after the maps are written
	// Trace has the init record when it passed each step (Status.Marks).
	Trace bool
	// TUN has the init create a TUN device in the sandbox's network
	// namespace and pass it back (Init.TUN).
	TUN *TUN
	// NoMPTCP turns MPTCP off in the sandbox's network namespace, which
	// Landlock's TCP rules (Config.Landlock's HandledNet) do not cover.
	NoMPTCP bool
	// CgroupSelf are cgroup v1 "tasks" files the init's first stage
	// writes "0" into before it makes the sandbox's PID 1, which is so
	// born in them (see cgroup.Group.JoinFiles).
	CgroupSelf []string
}

// TUN describes the sandbox's TUN device.
type TUN struct {
	Name          string
	MTU           uint32
	Addr4         [4]byte
	Prefix4       uint32
	Addr6         *[16]byte // nil: IPv4 only
	Prefix6       uint32
	DefaultRoutes bool // route everything through the device
}

// Config is everything else the init needs to build one sandbox.
type Config struct {
	SpawnConfig
	Cgroups []string // cgroup.procs files the init joins
	// IDMapUID/GID, when set, describe a separate user namespace used for
	// OpIDMap mounts instead of the sandbox's own.
	IDMapUID, IDMapGID string
	Ops                []Op
	Hostname           string
	Scratch            string // host directory the staging tmpfs mounts on
	LoopbackUp         bool
	Seccomp            []byte // struct sock_filter[] in native byte order
	Caps               uint64 // capabilities the command keeps
	CapLast            uint32 // highest capability number the kernel knows
	Rlimits            []Rlimit
	User               *ID // the command's ids inside; nil keeps the init's
	Groups             []uint32
	RootReadOnly       bool
	TmpCheck           string // reported full at exit when no space is left
	NoNewPrivs         bool
	// Landlock, when set, has the command restricted by a Landlock
	// ruleset made once the root is built (NoNewPrivs must be set).
	Landlock *Landlock
}

// Landlock is a ruleset: the access rights it handles (denied unless a
// rule grants them) and the rules, each granting rights beneath a path of
// the built root. The rights are the kernel's LANDLOCK_ACCESS_* bits.
type Landlock struct {
	HandledFS, HandledNet uint64
	Rules                 []LandlockRule
}

// LandlockRule grants Access beneath Path (on a file, only the rights a
// file can have).
type LandlockRule struct {
	Path   string
	Access uint64
}

// Exec describes the command to start in a sandbox.
type Exec struct {
	Args   []string
	Env    []string
	Dir    string
	TTY    *Winsize // allocate a pseudo-terminal of this size
	Setsid bool
	Stdio  []int // exactly 3 descriptors, or none for /dev/null (ignored with TTY)
}

// Winsize is a terminal size.
type Winsize struct{ Rows, Cols uint16 }

// FuseIdentity is OpFuse's D: the identity of the image file (from its
// stat) the init checks the file it opens against, and the image's offset.
func FuseIdentity(dev, ino uint64, size int64, mtime, ctime [2]int64, offset int64) string {
	return fmt.Sprintf("%d %d %d %d %d %d %d %d", dev, ino, size, mtime[0], mtime[1], ctime[0], ctime[1], offset)
}
