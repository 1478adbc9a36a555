package seccomp

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func archProbes() []probe {
	return []probe{
		// An x32 call from a 64-bit process; an unfiltered kernel runs it,
		// or answers ENOSYS when built without x32.
		{name: "x32_getpid", want: syscall.EPERM, denied: true, call: func() error {
			return sysErr(unix.RawSyscall(x32Flag|unix.SYS_GETPID, 0, 0, 0))
		}},
		// iopl(0) asks for no port access, so unfiltered it changes nothing.
		{name: "iopl_0", want: syscall.EPERM, denied: true, call: func() error {
			return sysErr(unix.Syscall(unix.SYS_IOPL, 0, 0, 0))
		}},
	}
}

// elfProbe is one system call made by a static 32-bit x86 program through
// int $0x80, so it reaches the filter with AUDIT_ARCH_I386.
type elfProbe struct {
	name   string
	nr     uint32
	args   [5]uint32
	want   syscall.Errno // exit status: the call's errno, 0 for success
	denied bool          // the filter, not the kernel, produces want
}

// i386Programs writes one tiny 32-bit program per probe and returns the
// probes with the child arguments that name them.
func i386Programs(t *testing.T) ([]elfProbe, []string) {
	const bad = 0xffffffff // fd -1, or an invalid command
	ps := []elfProbe{
		{name: "read_bad_fd", nr: i386Read, args: [5]uint32{bad}, want: syscall.EBADF},
		{name: "ioctl_tcgets_bad_fd", nr: i386Ioctl, args: [5]uint32{bad, unix.TCGETS}, want: syscall.EBADF},
		{name: "keyctl", nr: i386Keyctl, args: [5]uint32{9999}, want: syscall.EPERM, denied: true},
		{name: "ioctl_tiocsti", nr: i386Ioctl, args: [5]uint32{bad, unix.TIOCSTI}, want: syscall.EPERM, denied: true},
		{name: "clone_newuser", nr: i386Clone, args: [5]uint32{unix.CLONE_NEWUSER | unix.CLONE_FS}, want: syscall.EPERM, denied: true},
		{name: "unshare_newns", nr: i386Unshare, args: [5]uint32{unix.CLONE_NEWNS}, want: syscall.EPERM, denied: true},
		{name: "clone3", nr: i386Clone3, want: syscall.ENOSYS, denied: true},
		{name: "mount", nr: 21, want: syscall.EPERM, denied: true},
		{name: "clock_settime64", nr: i386ClockSettime64, args: [5]uint32{unix.CLOCK_MONOTONIC}, want: syscall.EPERM, denied: true},
		{name: "bpf", nr: 357, args: [5]uint32{bad}, want: syscall.EPERM, denied: true},
	}
	dir := t.TempDir()
	var args []string
	for _, p := range ps {
		path := filepath.Join(dir, p.name)
		if err := os.WriteFile(path, i386Exe(p.nr, p.args), 0o755); err != nil {
			t.Fatal(err)
		}
		args = append(args, p.name+"="+path)
	}
	return ps, args
}

// i386Exe returns a static ELF32 executable that makes system call nr
// with args and exits with the call's errno (the low byte of -eax).
func i386Exe(nr uint32, args [5]uint32) []byte {
	le := binary.LittleEndian
	const (
		base   = 0x08048000
		ehsize = 52
		phsize = 32
	)
	var code []byte
	mov := func(op byte, v uint32) { code = le.AppendUint32(append(code, op), v) }
	mov(0xb8, nr)      // mov $nr, %eax
	mov(0xbb, args[0]) // mov $a0, %ebx
	mov(0xb9, args[1]) // mov $a1, %ecx
	mov(0xba, args[2]) // mov $a2, %edx
	mov(0xbe, args[3]) // mov $a3, %esi
	mov(0xbf, args[4]) // mov $a4, %edi
	code = append(code,
		0xcd, 0x80, // int $0x80
		0xf7, 0xd8, // neg %eax
		0x89, 0xc3, // mov %eax, %ebx
	)
	mov(0xb8, 1)                    // mov $1, %eax (exit)
	code = append(code, 0xcd, 0x80) // int $0x80
	size := uint32(ehsize + phsize + len(code))

	b := []byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS32), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)}
	b = append(b, make([]byte, elf.EI_NIDENT-len(b))...)
	b = le.AppendUint16(b, uint16(elf.ET_EXEC))
	b = le.AppendUint16(b, uint16(elf.EM_386))
	b = le.AppendUint32(b, uint32(elf.EV_CURRENT))
	b = le.AppendUint32(b, base+ehsize+phsize) // e_entry: the code
	b = le.AppendUint32(b, ehsize)             // e_phoff
	b = le.AppendUint32(b, 0)                  // e_shoff
	b = le.AppendUint32(b, 0)                  // e_flags
	b = le.AppendUint16(b, ehsize)
	b = le.AppendUint16(b, phsize)
	b = le.AppendUint16(b, 1) // e_phnum
	b = le.AppendUint16(b, 0) // e_shentsize
	b = le.AppendUint16(b, 0) // e_shnum
	b = le.AppendUint16(b, 0) // e_shstrndx
	// One PT_LOAD maps the whole file, headers included.
	b = le.AppendUint32(b, uint32(elf.PT_LOAD))
	b = le.AppendUint32(b, 0)    // p_offset
	b = le.AppendUint32(b, base) // p_vaddr
	b = le.AppendUint32(b, base) // p_paddr
	b = le.AppendUint32(b, size) // p_filesz
	b = le.AppendUint32(b, size) // p_memsz
	b = le.AppendUint32(b, uint32(elf.PF_R|elf.PF_X))
	b = le.AppendUint32(b, 0x1000) // p_align
	return append(b, code...)
}

// TestI386Exe checks the hand-made executable with the standard library's
// ELF reader.
func TestI386Exe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "exe")
	if err := os.WriteFile(path, i386Exe(i386Read, [5]uint32{1, 2, 3, 4, 5}), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Class != elf.ELFCLASS32 || f.Machine != elf.EM_386 || f.Type != elf.ET_EXEC {
		t.Fatalf("class %v machine %v type %v", f.Class, f.Machine, f.Type)
	}
	if len(f.Progs) != 1 || f.Entry != f.Progs[0].Vaddr+52+32 {
		t.Fatalf("entry %#x, programs %d", f.Entry, len(f.Progs))
	}
}
