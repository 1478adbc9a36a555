package seccomp

import "golang.org/x/sys/unix"

// abis lists the ABIs an amd64 process can enter the kernel through that
// get rules: x86_64 itself, and i386 (int $0x80, 32-bit binaries). x32
// calls arrive with the x86_64 arch value and are refused in its block.
func abis() []abi {
	return []abi{
		{arch: unix.AUDIT_ARCH_X86_64, nr: nativeNr, denyX32: true},
		{arch: unix.AUDIT_ARCH_I386, nr: i386Nr},
	}
}

// nativeNr maps a catalogued name to its x86_64 number; ok is false for
// names x86_64 does not have.
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
	case "create_module":
		return unix.SYS_CREATE_MODULE, true
	case "get_kernel_syms":
		return unix.SYS_GET_KERNEL_SYMS, true
	case "query_module":
		return unix.SYS_QUERY_MODULE, true
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
	case "iopl":
		return unix.SYS_IOPL, true
	case "ioperm":
		return unix.SYS_IOPERM, true
	case "quotactl":
		return unix.SYS_QUOTACTL, true
	case "quotactl_fd":
		return unix.SYS_QUOTACTL_FD, true
	case "lookup_dcookie":
		return unix.SYS_LOOKUP_DCOOKIE, true
	case "nfsservctl":
		return unix.SYS_NFSSERVCTL, true
	case "uselib":
		return unix.SYS_USELIB, true
	case "ustat":
		return unix.SYS_USTAT, true
	case "sysfs":
		return unix.SYS_SYSFS, true
	case "_sysctl":
		return unix.SYS__SYSCTL, true
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
	// umount, vm86, vm86old, clock_settime64 and clock_adjtime64 exist
	// only in the i386 table.
	return 0, false
}

// i386Nr maps a catalogue name to its i386 number (arch/x86/entry/
// syscalls/syscall_32.tbl); ok is false for names i386 does not have.
// golang.org/x/sys/unix only carries these numbers when GOARCH=386, hence
// the table. TestI386TableMatchesHeader checks it against unistd_32.h.
func i386Nr(name string) (nr uint32, ok bool) {
	switch name {
	case "mount":
		return 21, true
	case "umount":
		return 22, true
	case "ptrace":
		return 26, true
	case "acct":
		return 51, true
	case "umount2":
		return 52, true
	case "ioctl":
		return 54, true
	case "ustat":
		return 62, true
	case "settimeofday":
		return 79, true
	case "uselib":
		return 86, true
	case "swapon":
		return 87, true
	case "reboot":
		return 88, true
	case "ioperm":
		return 101, true
	case "syslog":
		return 103, true
	case "iopl":
		return 110, true
	case "vm86old":
		return 113, true
	case "swapoff":
		return 115, true
	case "clone":
		return 120, true
	case "adjtimex":
		return 124, true
	case "create_module":
		return 127, true
	case "init_module":
		return 128, true
	case "delete_module":
		return 129, true
	case "get_kernel_syms":
		return 130, true
	case "quotactl":
		return 131, true
	case "sysfs":
		return 135, true
	case "personality":
		return 136, true
	case "_sysctl":
		return 149, true
	case "vm86":
		return 166, true
	case "query_module":
		return 167, true
	case "nfsservctl":
		return 169, true
	case "pivot_root":
		return 217, true
	case "lookup_dcookie":
		return 253, true
	case "clock_settime":
		return 264, true
	case "kexec_load":
		return 283, true
	case "add_key":
		return 286, true
	case "request_key":
		return 287, true
	case "keyctl":
		return 288, true
	case "unshare":
		return 310, true
	case "perf_event_open":
		return 336, true
	case "name_to_handle_at":
		return 341, true
	case "open_by_handle_at":
		return 342, true
	case "clock_adjtime":
		return 343, true
	case "setns":
		return 346, true
	case "process_vm_readv":
		return 347, true
	case "process_vm_writev":
		return 348, true
	case "kcmp":
		return 349, true
	case "finit_module":
		return 350, true
	case "bpf":
		return 357, true
	case "userfaultfd":
		return 374, true
	case "clock_settime64":
		return 404, true
	case "clock_adjtime64":
		return 405, true
	case "io_uring_setup":
		return 425, true
	case "io_uring_enter":
		return 426, true
	case "io_uring_register":
		return 427, true
	case "open_tree":
		return 428, true
	case "move_mount":
		return 429, true
	case "fsopen":
		return 430, true
	case "fsconfig":
		return 431, true
	case "fsmount":
		return 432, true
	case "fspick":
		return 433, true
	case "clone3":
		return 435, true
	case "mount_setattr":
		return 442, true
	case "quotactl_fd":
		return 443, true
	}
	// kexec_file_load has no i386 entry.
	return 0, false
}
