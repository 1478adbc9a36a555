package seccomp

import "golang.org/x/sys/unix"

// abis lists the ABIs an arm64 process gets rules for. AArch32 calls, from
// 32-bit binaries on CPUs that still run them, arrive with AUDIT_ARCH_ARM
// and are refused like any other foreign ABI.
func abis() []abi {
	return []abi{{arch: unix.AUDIT_ARCH_AARCH64, nr: nativeNr}}
}

// nativeNr maps a catalogued name to its arm64 number; ok is false for
// names arm64 does not have.
func nativeNr(name string) (nr uint32, ok bool) {
	switch name {
	case "keyctl":
		return unix.SYS_KEYCTL, true
	case "add_key":
		return unix.SYS_ADD_KEY, true
	case "request_key":
		return unix.SYS_REQUEST_KEY, true
	case "bpf":
		return unix.SYS_BPF, true
	case "perf_event_open":
		return unix.SYS_PERF_EVENT_OPEN, true
	case "userfaultfd":
		return unix.SYS_USERFAULTFD, true
	case "init_module":
		return unix.SYS_INIT_MODULE, true
	case "finit_module":
		return unix.SYS_FINIT_MODULE, true
	case "delete_module":
		return unix.SYS_DELETE_MODULE, true
	case "kexec_load":
		return unix.SYS_KEXEC_LOAD, true
	case "kexec_file_load":
		return unix.SYS_KEXEC_FILE_LOAD, true
	case "mount":
		return unix.SYS_MOUNT, true
	case "umount2":
		return unix.SYS_UMOUNT2, true
	case "pivot_root":
		return unix.SYS_PIVOT_ROOT, true
	case "move_mount":
		return unix.SYS_MOVE_MOUNT, true
	case "open_tree":
		return unix.SYS_OPEN_TREE, true
	case "fsopen":
		return unix.SYS_FSOPEN, true
	case "fsconfig":
		return unix.SYS_FSCONFIG, true
	case "fsmount":
		return unix.SYS_FSMOUNT, true
	case "fspick":
		return unix.SYS_FSPICK, true
	case "mount_setattr":
		return unix.SYS_MOUNT_SETATTR, true
	case "open_by_handle_at":
		return unix.SYS_OPEN_BY_HANDLE_AT, true
	case "name_to_handle_at":
		return unix.SYS_NAME_TO_HANDLE_AT, true
	case "setns":
		return unix.SYS_SETNS, true
	case "unshare":
		return unix.SYS_UNSHARE, true
	case "clone":
		return unix.SYS_CLONE, true
	case "clone3":
		return unix.SYS_CLONE3, true
	case "ioctl":
		return unix.SYS_IOCTL, true
	case "io_uring_setup":
		return unix.SYS_IO_URING_SETUP, true
	case "io_uring_enter":
		return unix.SYS_IO_URING_ENTER, true
	case "io_uring_register":
		return unix.SYS_IO_URING_REGISTER, true
	case "acct":
		return unix.SYS_ACCT, true
	case "swapon":
		return unix.SYS_SWAPON, true
	case "swapoff":
		return unix.SYS_SWAPOFF, true
	case "reboot":
		return unix.SYS_REBOOT, true
	case "settimeofday":
		return unix.SYS_SETTIMEOFDAY, true
	case "clock_settime":
		return unix.SYS_CLOCK_SETTIME, true
	case "clock_adjtime":
		return unix.SYS_CLOCK_ADJTIME, true
	case "adjtimex":
		return unix.SYS_ADJTIMEX, true
	case "quotactl":
		return unix.SYS_QUOTACTL, true
	case "quotactl_fd":
		return unix.SYS_QUOTACTL_FD, true
	case "lookup_dcookie":
		return unix.SYS_LOOKUP_DCOOKIE, true
	case "nfsservctl":
		return unix.SYS_NFSSERVCTL, true
	case "syslog":
		return unix.SYS_SYSLOG, true
	case "ptrace":
		return unix.SYS_PTRACE, true
	case "process_vm_readv":
		return unix.SYS_PROCESS_VM_READV, true
	case "process_vm_writev":
		return unix.SYS_PROCESS_VM_WRITEV, true
	case "kcmp":
		return unix.SYS_KCMP, true
	case "personality":
		return unix.SYS_PERSONALITY, true
	}
	// arm64 uses the asm-generic table, which has none of the legacy calls
	// (create_module, get_kernel_syms, query_module, umount, uselib, ustat,
	// sysfs, _sysctl), none of the x86-only ones (iopl, ioperm, vm86,
	// vm86old) and no separate time64 calls.
	return 0, false
}
