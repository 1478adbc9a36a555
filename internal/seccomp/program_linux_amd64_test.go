package seccomp

import (
	"testing"

	"golang.org/x/sys/unix"
)

const nativeArch = unix.AUDIT_ARCH_X86_64

// i386 syscall numbers, written out here rather than taken from the
// package's table so that the decisions below check the table too.
const (
	i386Read           = 3
	i386Ioctl          = 54
	i386Clone          = 120
	i386Keyctl         = 288
	i386Unshare        = 310
	i386ClockSettime64 = 404
	i386Clone3         = 435
)

func i386(nr uint32, args ...uint64) call {
	c := call{nr: nr, arch: unix.AUDIT_ARCH_I386}
	copy(c.args[:], args)
	return c
}

// archDecisions hold for Default() on amd64 beyond the native ones.
func archDecisions() []decision {
	return []decision{
		{"i386_read", i386(i386Read, 0, 0, 0), allow},
		{"i386_keyctl", i386(i386Keyctl), fail(unix.EPERM)},
		{"i386_ioctl_tiocsti", i386(i386Ioctl, 0, unix.TIOCSTI), fail(unix.EPERM)},
		{"i386_ioctl_tcgets", i386(i386Ioctl, 0, unix.TCGETS), allow},
		{"i386_clone_newuser", i386(i386Clone, unix.CLONE_NEWUSER), fail(unix.EPERM)},
		{"i386_clone_fork", i386(i386Clone, uint64(unix.SIGCHLD)), allow},
		{"i386_unshare_newns", i386(i386Unshare, unix.CLONE_NEWNS), fail(unix.EPERM)},
		{"i386_clone3", i386(i386Clone3), fail(unix.ENOSYS)},
		{"i386_clock_settime64", i386(i386ClockSettime64), fail(unix.EPERM)},
		// 288 is keyctl on i386 but accept4 on x86_64.
		{"x86_64_accept4", native(288), allow},
		{"x32_read", native(0x40000000 | unix.SYS_READ), fail(unix.EPERM)},
		{"x32_keyctl", native(0x40000000 | unix.SYS_KEYCTL), fail(unix.EPERM)},
		{"x32_top", native(0x7fffffff), fail(unix.EPERM)},
		{"nr_minus_one", native(0xffffffff), allow},
		{"x86_64_nr_beyond_table", native(0x3fffffff), allow},
	}
}

// zeroArchDecisions hold for the zero Profile on amd64: the i386 ABI is
// open like the native one, x32 is still refused.
func zeroArchDecisions() []decision {
	return []decision{
		{"i386_keyctl", i386(i386Keyctl), allow},
		{"i386_read", i386(i386Read), allow},
		{"x32_read", native(0x40000000 | unix.SYS_READ), fail(unix.EPERM)},
		{"nr_minus_one", native(0xffffffff), allow},
	}
}

// archAbsent lists catalogued names that no amd64 ABI has.
// Every one is in x86_64 or i386.
func archAbsent() []string { return nil }

func TestX86_64TableMatchesHeader(t *testing.T) {
	h := parseHeader(t, "/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h")
	checkTable(t, h, nativeNr, catalogueNames())
}

func TestI386TableMatchesHeader(t *testing.T) {
	h := parseHeader(t, "/usr/include/x86_64-linux-gnu/asm/unistd_32.h", "/usr/include/asm/unistd_32.h")
	checkTable(t, h, i386Nr, catalogueNames())
}
