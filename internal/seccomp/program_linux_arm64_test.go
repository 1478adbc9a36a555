package seccomp

import (
	"testing"

	"golang.org/x/sys/unix"
)

const nativeArch = unix.AUDIT_ARCH_AARCH64

// archDecisions hold for Default() on arm64 beyond the native ones: AArch32
// calls are refused whatever they are.
func archDecisions() []decision {
	return []decision{
		{"aarch32_read", call{nr: 3, arch: unix.AUDIT_ARCH_ARM}, fail(unix.EPERM)},
		{"aarch32_keyctl", call{nr: 311, arch: unix.AUDIT_ARCH_ARM}, fail(unix.EPERM)},
		{"x86_64_read", call{nr: 0, arch: unix.AUDIT_ARCH_X86_64}, fail(unix.EPERM)},
	}
}

func zeroArchDecisions() []decision {
	return []decision{
		{"aarch32_read", call{nr: 3, arch: unix.AUDIT_ARCH_ARM}, fail(unix.EPERM)},
		{"nr_minus_one", native(0xffffffff), allow},
	}
}

// archAbsent lists catalogued names arm64 does not have.
func archAbsent() []string {
	return []string{"create_module", "get_kernel_syms", "query_module", "umount", "uselib",
		"ustat", "sysfs", "_sysctl", "iopl", "ioperm", "vm86", "vm86old",
		"clock_settime64", "clock_adjtime64"}
}

func TestArm64TableMatchesHeader(t *testing.T) {
	h := parseHeader(t, "/usr/include/asm-generic/unistd.h")
	// The header defines the time64 calls inside an #if for 32-bit ABIs,
	// which parseHeader does not evaluate; arm64 has none of archAbsent.
	for _, name := range archAbsent() {
		delete(h, name)
	}
	checkTable(t, h, nativeNr, catalogueNames())
}
