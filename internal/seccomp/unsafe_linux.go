package seccomp

import (
	"errors"
	"os"
	"runtime"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Encode returns prog as the C init reads it: an array of struct
// sock_filter {u16 code; u8 jt; u8 jf; u32 k} in native byte order, 8
// bytes per instruction, ready to become the filter of a struct
// sock_fprog.
func Encode(prog []unix.SockFilter) []byte {
	if len(prog) == 0 {
		return nil
	}
	// unix.SockFilter has the kernel's layout, so its memory is the
	// encoding.
	n := len(prog) * int(unsafe.Sizeof(prog[0]))
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&prog[0])), n)...)
}

// Install sets no_new_privs and installs prog as a seccomp filter on every
// thread of the calling process (SECCOMP_FILTER_FLAG_TSYNC), which a Go
// program needs as it runs on many threads. It is for tests and re-executed
// helpers; pinfold's sandbox init installs the encoded program itself. A
// filter cannot be removed: call Install only in a process that is meant
// to stay filtered.
func Install(prog []unix.SockFilter) error {
	if len(prog) == 0 || len(prog) > maxInsns {
		return errors.New("seccomp: cannot install a program of " + strconv.Itoa(len(prog)) + " instructions")
	}
	// no_new_privs is set per thread; TSYNC copies it to the other threads
	// along with the filter, so both calls must run on the same thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return os.NewSyscallError("prctl PR_SET_NO_NEW_PRIVS", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	tid, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return os.NewSyscallError("seccomp SECCOMP_SET_MODE_FILTER", errno)
	}
	if tid != 0 {
		// With TSYNC, success is 0 and a positive value names a thread
		// whose existing filters are not an ancestor of ours.
		return errors.New("seccomp: thread " + strconv.FormatUint(uint64(tid), 10) +
			" could not be synchronised to the new filter")
	}
	return nil
}
