package seccomp

import (
	"errors"
	"slices"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// abi is one way into the kernel that the filter has rules for.
type abi struct {
	arch    uint32                           // AUDIT_ARCH_* value in seccomp_data.arch
	nr      func(name string) (uint32, bool) // catalogue name to syscall number
	denyX32 bool                             // refuse numbers carrying x32Bit
}

// Layout of struct seccomp_data: int nr; u32 arch; u64 ip; u64 args[6].
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// argLow is the offset of the low 32 bits of syscall argument i. Every
// architecture Program supports is little-endian.
func argLow(i uint32) uint32 { return offArgs + 8*i }

const (
	x32Bit = 0x40000000 // __X32_SYSCALL_BIT
	noCall = 0xffffffff // nr -1: no call, e.g. one a tracer skipped

	// newNamespaceFlags are the CLONE_NEW* bits; all fit in 32 bits.
	newNamespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS |
		unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID |
		unix.CLONE_NEWNET | unix.CLONE_NEWTIME

	// The flags of clone and unshare are argument 0 on x86_64, i386 and
	// arm64 (s390 would differ: its clone takes the stack first), and an
	// ioctl's request is argument 1.
	flagsArg   = 0
	requestArg = 1

	// maxInsns is the kernel's limit on a filter's length (BPF_MAXINSNS).
	maxInsns = unix.BPF_MAXINSNS

	// maxJump is the farthest a conditional jump reaches (jt and jf are u8).
	maxJump = 255
)

// Opcodes used by the program; seccomp accepts a subset of classic BPF.
const (
	opLoad = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS  // A = seccomp_data[k:k+4]
	opJeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K // A == k ? jt : jf
	opJset = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	opJa   = unix.BPF_JMP | unix.BPF_JA // pc += k; k is 32 bits wide
	opRet  = unix.BPF_RET | unix.BPF_K
)

const retAllow = unix.SECCOMP_RET_ALLOW

func retErrno(e syscall.Errno) uint32 {
	return unix.SECCOMP_RET_ERRNO | uint32(e)&unix.SECCOMP_RET_DATA
}

// Program compiles p for the running architecture. It fails on an invalid
// profile, on an architecture without a syscall table
// (ErrUnsupportedArch), and if the program would exceed the kernel's
// 4096-instruction limit.
//
// Every conditional jump goes forward at most 255 instructions; longer
// skips go through an unconditional jump, whose offset is 32 bits wide.
func (p Profile) Program() ([]unix.SockFilter, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	abis := abis()
	if len(abis) == 0 {
		return nil, ErrUnsupportedArch
	}
	prog := make(asm, 0, 16+len(abis)*(len(p.Syscalls)+2*len(p.Ioctls)+24))
	scratch := make([]deny, 0, len(p.Syscalls)+1)
	prog.op(opLoad, offArch)
	for _, b := range abis {
		start := len(prog)
		scratch = p.rules(&prog, b, scratch[:0])
		prog.guard(start, b.arch)
	}
	prog.op(opRet, retErrno(syscall.EPERM)) // any other ABI
	if len(prog) > maxInsns {
		return nil, errors.New("seccomp: program has " + strconv.Itoa(len(prog)) +
			" instructions, more than the kernel's limit of " + strconv.Itoa(maxInsns))
	}
	return prog, nil
}

// deny is a call refused whatever its arguments.
type deny struct {
	nr    uint32
	errno syscall.Errno
}

func refused(ds []deny, nr uint32) bool {
	for _, d := range ds {
		if d.nr == nr {
			return true
		}
	}
	return false
}

// rules appends the block for one ABI, which runs with A holding the arch
// and always ends in a return. ds is scratch space.
func (p Profile) rules(a *asm, b abi, ds []deny) []deny {
	a.op(opLoad, offNr)
	if b.denyX32 {
		// x32 numbers carry x32Bit; nr -1 does too when read unsigned,
		// but is no call and is left for the kernel to answer ENOSYS.
		a.jump(opJset, x32Bit, 0, 3)
		a.jump(opJeq, noCall, 1, 0)
		a.op(opRet, retErrno(syscall.EPERM))
		a.op(opRet, retAllow)
	}

	// Collect the calls refused whatever their arguments: named ones
	// first, so that their errno wins, then clone3.
	for _, s := range p.Syscalls {
		if nr, ok := b.nr(s.Name); ok && !refused(ds, nr) {
			e := s.Errno
			if e == 0 {
				e = syscall.EPERM
			}
			ds = append(ds, deny{nr, e})
		}
	}
	if p.NoNewNamespaces {
		if nr, ok := b.nr("clone3"); ok && !refused(ds, nr) {
			ds = append(ds, deny{nr, syscall.ENOSYS})
		}
	}

	// Calls decided by an argument. They come first because they are the
	// only allowed calls that run the filter at all (the kernel caches the
	// verdict for the rest), and ioctl is frequent. Each block ends in
	// returns, so loading the argument over the number is harmless.
	if nr, ok := b.nr("ioctl"); ok && len(p.Ioctls) > 0 && !refused(ds, nr) {
		start := len(*a)
		a.op(opLoad, argLow(requestArg))
		a.denyIf(p.Ioctls, syscall.EPERM)
		a.op(opRet, retAllow)
		a.guard(start, nr)
	}
	if p.NoNewNamespaces {
		var calls [2]uint32
		n := 0
		for _, name := range [...]string{"clone", "unshare"} {
			if nr, ok := b.nr(name); ok && !refused(ds, nr) {
				calls[n] = nr
				n++
			}
		}
		if n > 0 {
			start := len(*a)
			a.op(opLoad, argLow(flagsArg))
			a.jump(opJset, newNamespaceFlags, 0, 1)
			a.op(opRet, retErrno(syscall.EPERM))
			a.op(opRet, retAllow)
			a.guard(start, calls[:n]...)
		}
	}

	// Then the calls refused outright, one run of tests per errno.
	nrs := make([]uint32, 0, len(ds))
	for i, d := range ds {
		if hasErrno(ds[:i], d.errno) {
			continue // group already emitted
		}
		nrs = nrs[:0]
		for _, o := range ds[i:] {
			if o.errno == d.errno {
				nrs = append(nrs, o.nr)
			}
		}
		a.denyIf(nrs, d.errno)
	}

	a.op(opRet, retAllow)
	return ds
}

func hasErrno(ds []deny, e syscall.Errno) bool {
	for _, d := range ds {
		if d.errno == e {
			return true
		}
	}
	return false
}

// asm is a program under construction.
type asm []unix.SockFilter

func (a *asm) op(code uint16, k uint32) {
	*a = append(*a, unix.SockFilter{Code: code, K: k})
}

func (a *asm) jump(code uint16, k uint32, jt, jf uint8) {
	*a = append(*a, unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k})
}

// guard puts "if A is one of ks" in front of the instructions from start
// to the end: a match falls into them, anything else skips them. ks must
// hold between 1 and maxJump-1 values; the guarded block may be any length.
func (a *asm) guard(start int, ks ...uint32) {
	n := len(*a) - start
	long := n > maxJump
	var buf [4]unix.SockFilter
	g := buf[:0]
	last := len(ks) - 1
	for i, k := range ks[:last] {
		// Jump over the remaining tests (and the long skip) into the block.
		jt := last - i
		if long {
			jt++
		}
		g = append(g, unix.SockFilter{Code: opJeq, Jt: uint8(jt), K: k})
	}
	if long {
		g = append(g, unix.SockFilter{Code: opJeq, Jt: 1, K: ks[last]},
			unix.SockFilter{Code: opJa, K: uint32(n)})
	} else {
		g = append(g, unix.SockFilter{Code: opJeq, Jf: uint8(n), K: ks[last]})
	}
	*a = slices.Insert(*a, start, g...)
}

// denyIf appends "if A is one of ks, fail with e". The tests come in runs
// of at most maxJump, each followed by its return, which keeps every jump
// in range.
func (a *asm) denyIf(ks []uint32, e syscall.Errno) {
	ret := unix.SockFilter{Code: opRet, K: retErrno(e)}
	run := len(*a) // first test of the current run
	for _, k := range ks {
		if len(*a)-run == maxJump {
			a.closeRun(run, ret)
			run = len(*a)
		}
		a.jump(opJeq, k, 0, 0)
	}
	if len(*a) > run {
		a.closeRun(run, ret)
	}
}

// closeRun points the tests from run to the end at a return appended
// after them; the last test skips the return on a mismatch.
func (a *asm) closeRun(run int, ret unix.SockFilter) {
	tests := (*a)[run:]
	last := len(tests) - 1
	for i := range tests[:last] {
		tests[i].Jt = uint8(last - i)
	}
	tests[last].Jf = 1
	*a = append(*a, ret)
}
