// Package seccomp builds the classic-BPF seccomp filter that the sandbox
// init installs before it executes the user's command.
//
// A Profile is plain data saying what to deny; Profile.Program compiles it
// for the running architecture and Encode turns the program into the bytes
// the C init passes to seccomp(2). The filter never kills: a denied call
// fails with an errno (EPERM, or ENOSYS where callers are expected to fall
// back to an older interface), and everything not named is allowed.
//
// Every program first checks seccomp_data.arch. The native ABI gets the
// profile's rules; on amd64 the i386 ABI (32-bit binaries and int $0x80)
// gets the same rules under its own syscall numbers, while x32 calls
// (numbers with bit 0x40000000 set) are refused. Any other ABI fails every
// call with EPERM.
//
// The program tests the syscall number against constants before it loads
// any argument, so the kernel's per-filter action cache (Linux 5.11 and
// later) lets allowed calls skip the filter; only denied calls and calls
// whose arguments must be inspected (clone, unshare, ioctl) run it.
//
// The package has no package-level state and does no work at start-up.
package seccomp

import (
	"errors"
	"strconv"
	"syscall"
)

// Profile says what the filter denies. The zero Profile denies nothing
// beyond the architecture checks described in the package documentation.
type Profile struct {
	// Syscalls fail with their errno whatever their arguments. A name that
	// does not exist on an architecture is skipped there. A syscall named
	// here overrides the argument checks below (naming "ioctl" makes every
	// ioctl fail, not only the requests in Ioctls).
	Syscalls []Syscall

	// Ioctls are ioctl requests that fail with EPERM. The filter compares
	// only the low 32 bits of the request, as the kernel truncates it to
	// 32 bits before use, so setting high bits cannot get around a rule.
	Ioctls []uint32

	// NoNewNamespaces makes clone and unshare fail with EPERM when the low
	// 32 bits of their flags hold any CLONE_NEW* bit, and makes clone3
	// fail with ENOSYS, because its flags live in memory the filter cannot
	// read; ENOSYS sends glibc, musl and Go back to clone.
	NoNewNamespaces bool
}

// Syscall is one system call the filter refuses outright.
type Syscall struct {
	// Name is the kernel's name for the call, without the sys_ prefix:
	// "keyctl", "umount2", "clock_settime64". Program rejects names it
	// does not know.
	Name string

	// Errno is the Linux errno the call fails with. Zero means EPERM, so
	// that a forgotten errno cannot make a call "succeed" unexecuted.
	Errno syscall.Errno
}

// Error is the type of this package's sentinel errors. Being a string
// type, its values are constants and cost nothing at start-up.
type Error string

func (e Error) Error() string { return string(e) }

// ErrUnsupportedArch is returned by Program on an architecture for which
// the package has no syscall table.
const ErrUnsupportedArch Error = "seccomp: no syscall table for this architecture"

// Request numbers of the two terminal ioctls the default profile denies.
// They are the same on x86 and on the asm-generic layout used by arm64,
// the only architectures Program supports.
const (
	tiocsti   = 0x5412 // TIOCSTI: push a byte into a terminal's input
	tioclinux = 0x541c // TIOCLINUX: virtual console tricks, incl. selection paste
)

// Default returns the profile pinfold uses unless told otherwise: calls a
// sandboxed command has no business making, which reach kernel attack
// surface or state shared with the host.
func Default() Profile {
	eperm := syscall.EPERM
	enosys := syscall.ENOSYS
	return Profile{
		Syscalls: []Syscall{
			// Kernel keyrings are not namespaced.
			{"keyctl", eperm}, {"add_key", eperm}, {"request_key", eperm},
			// Large attack surface, rarely needed by commands.
			{"bpf", eperm}, {"perf_event_open", eperm}, {"userfaultfd", eperm},
			// Kernel modules and kexec.
			{"init_module", eperm}, {"finit_module", eperm}, {"delete_module", eperm},
			{"create_module", eperm}, {"get_kernel_syms", eperm}, {"query_module", eperm},
			{"kexec_load", eperm}, {"kexec_file_load", eperm},
			// Mounts, old and new API.
			{"mount", eperm}, {"umount", eperm}, {"umount2", eperm}, {"pivot_root", eperm},
			{"move_mount", eperm}, {"open_tree", eperm}, {"fsopen", eperm},
			{"fsconfig", eperm}, {"fsmount", eperm}, {"fspick", eperm},
			{"mount_setattr", eperm},
			// File handles can open files outside the sandbox's root.
			{"open_by_handle_at", eperm}, {"name_to_handle_at", eperm},
			// Joining namespaces; creating them is handled by NoNewNamespaces.
			{"setns", eperm},
			// io_uring bypasses per-syscall filtering; ENOSYS makes libuv
			// and friends fall back to ordinary calls.
			{"io_uring_setup", enosys}, {"io_uring_enter", enosys}, {"io_uring_register", enosys},
			// Privileged or legacy calls that reach host-wide state.
			{"acct", eperm}, {"swapon", eperm}, {"swapoff", eperm}, {"reboot", eperm},
			{"settimeofday", eperm}, {"clock_settime", eperm}, {"clock_settime64", eperm},
			{"clock_adjtime", eperm}, {"clock_adjtime64", eperm}, {"adjtimex", eperm},
			{"iopl", eperm}, {"ioperm", eperm}, {"quotactl", eperm}, {"quotactl_fd", eperm},
			{"lookup_dcookie", eperm}, {"nfsservctl", eperm}, {"uselib", eperm},
			{"ustat", eperm}, {"sysfs", eperm}, {"_sysctl", eperm},
			{"vm86", eperm}, {"vm86old", eperm}, {"syslog", eperm},
		},
		Ioctls:          []uint32{tiocsti, tioclinux},
		NoNewNamespaces: true,
	}
}

// Denied names what p denies, for documentation: syscall names as written
// in p.Syscalls, then "ioctl(TIOCSTI)" and the like for p.Ioctls, then
// "clone(CLONE_NEW*)", "unshare(CLONE_NEW*)" and "clone3" when
// p.NoNewNamespaces is set. Names are listed whether or not the running
// architecture has the call.
func (p Profile) Denied() []string {
	out := make([]string, 0, len(p.Syscalls)+len(p.Ioctls)+3)
	for _, s := range p.Syscalls {
		out = append(out, s.Name)
	}
	for _, r := range p.Ioctls {
		out = append(out, "ioctl("+ioctlName(r)+")")
	}
	if p.NoNewNamespaces {
		out = append(out, "clone(CLONE_NEW*)", "unshare(CLONE_NEW*)", "clone3")
	}
	return out
}

func ioctlName(r uint32) string {
	switch r {
	case tiocsti:
		return "TIOCSTI"
	case tioclinux:
		return "TIOCLINUX"
	}
	return "0x" + strconv.FormatUint(uint64(r), 16)
}

// maxErrno is the largest errno the kernel passes back to user space
// (MAX_ERRNO); larger SECCOMP_RET_ERRNO data is clamped by the kernel.
const maxErrno = 4095

// check reports the first problem with p: an unknown or repeated syscall
// name or an errno out of range.
func (p Profile) check() error {
	for i, s := range p.Syscalls {
		if !known(s.Name) {
			return errors.New("seccomp: unknown syscall " + strconv.Quote(s.Name))
		}
		if s.Errno > maxErrno {
			return errors.New("seccomp: errno " + strconv.FormatUint(uint64(s.Errno), 10) +
				" for " + s.Name + " is out of range")
		}
		for _, t := range p.Syscalls[:i] {
			if t.Name == s.Name {
				return errors.New("seccomp: syscall " + strconv.Quote(s.Name) + " listed twice")
			}
		}
	}
	return nil
}

// known reports whether name is in the package's syscall catalogue: the
// calls the per-architecture tables can resolve. A switch compiles to code,
// so the catalogue costs nothing until it is used.
func known(name string) bool {
	switch name {
	case "keyctl", "add_key", "request_key",
		"bpf", "perf_event_open", "userfaultfd",
		"init_module", "finit_module", "delete_module",
		"create_module", "get_kernel_syms", "query_module",
		"kexec_load", "kexec_file_load",
		"mount", "umount", "umount2", "pivot_root",
		"move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick",
		"mount_setattr",
		"open_by_handle_at", "name_to_handle_at",
		"setns", "unshare", "clone", "clone3", "ioctl",
		"io_uring_setup", "io_uring_enter", "io_uring_register",
		"acct", "swapon", "swapoff", "reboot",
		"settimeofday", "clock_settime", "clock_settime64",
		"clock_adjtime", "clock_adjtime64", "adjtimex",
		"iopl", "ioperm", "quotactl", "quotactl_fd",
		"lookup_dcookie", "nfsservctl", "uselib", "ustat", "sysfs", "_sysctl",
		"vm86", "vm86old", "syslog",
		"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "personality":
		return true
	}
	return false
}
