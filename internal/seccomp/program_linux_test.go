//go:build amd64 || arm64

package seccomp

import (
	"encoding/binary"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// call is a synthetic struct seccomp_data.
type call struct {
	nr   uint32 // int in the kernel; uint32 so that -1 and x32 numbers are easy to write
	arch uint32
	args [6]uint64
}

// bytes lays c out as the kernel does, in native byte order.
func (c call) bytes() []byte {
	b := make([]byte, 64)
	binary.NativeEndian.PutUint32(b[0:], c.nr)
	binary.NativeEndian.PutUint32(b[4:], c.arch)
	binary.NativeEndian.PutUint64(b[8:], 0x7f0000001000) // instruction_pointer
	for i, a := range c.args {
		binary.NativeEndian.PutUint64(b[16+8*i:], a)
	}
	return b
}

// run interprets prog on c the way the kernel's classic-BPF interpreter
// does, for the instructions seccomp accepts that a filter like ours could
// use. It returns the filter's verdict and whether any load looked past
// nr and arch, i.e. whether the kernel's action cache could skip the filter
// for this (nr, arch).
func run(t *testing.T, prog []unix.SockFilter, c call) (verdict uint32, readArgs bool) {
	t.Helper()
	data := c.bytes()
	var a, x uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		cond := func(ok bool) {
			if ok {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		}
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			if in.K%4 != 0 || in.K+4 > uint32(len(data)) {
				t.Fatalf("pc %d: load at offset %d", pc, in.K)
			}
			if in.K >= 8 {
				readArgs = true
			}
			a = binary.NativeEndian.Uint32(data[in.K:])
		case unix.BPF_LD | unix.BPF_IMM:
			a = in.K
		case unix.BPF_MISC | unix.BPF_TAX:
			x = a
		case unix.BPF_ALU | unix.BPF_AND | unix.BPF_K:
			a &= in.K
		case unix.BPF_JMP | unix.BPF_JA:
			pc += int(in.K)
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
			cond(a == in.K)
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_X:
			cond(a == x)
		case unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K:
			cond(a > in.K)
		case unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K:
			cond(a >= in.K)
		case unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			cond(a&in.K != 0)
		case unix.BPF_RET | unix.BPF_K:
			return in.K, readArgs
		default:
			t.Fatalf("pc %d: opcode %#x not handled", pc, in.Code)
		}
	}
	t.Fatal("ran off the end of the program")
	return 0, false
}

// validate checks what the kernel's checker and our own rules demand:
// a length the kernel takes, known opcodes, aligned loads inside
// seccomp_data, every jump landing inside the program, a return at the end,
// and no instruction that no path reaches.
func validate(t *testing.T, prog []unix.SockFilter) {
	t.Helper()
	n := len(prog)
	if n == 0 || n > unix.BPF_MAXINSNS {
		t.Fatalf("program has %d instructions", n)
	}
	if prog[n-1].Code != unix.BPF_RET|unix.BPF_K {
		t.Fatalf("last instruction is %#x, not a return", prog[n-1].Code)
	}
	reached := make([]bool, n)
	reached[0] = true
	target := func(pc int, off uint64) int {
		to := uint64(pc) + 1 + off
		if to >= uint64(n) {
			t.Fatalf("pc %d: jump to %d, past the end (%d)", pc, to, n)
		}
		return int(to)
	}
	for pc, in := range prog {
		if !reached[pc] {
			t.Fatalf("pc %d is unreachable", pc)
		}
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			if in.K%4 != 0 || in.K > 60 {
				t.Fatalf("pc %d: load at offset %d", pc, in.K)
			}
			reached[target(pc, 0)] = true
		case unix.BPF_JMP | unix.BPF_JA:
			reached[target(pc, uint64(in.K))] = true
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			reached[target(pc, uint64(in.Jt))] = true
			reached[target(pc, uint64(in.Jf))] = true
		case unix.BPF_RET | unix.BPF_K:
			if act := in.K & unix.SECCOMP_RET_ACTION_FULL; act != unix.SECCOMP_RET_ALLOW && act != unix.SECCOMP_RET_ERRNO {
				t.Fatalf("pc %d: action %#x; the filter must only allow or fail with an errno", pc, in.K)
			}
		default:
			t.Fatalf("pc %d: opcode %#x is not one the builder emits", pc, in.Code)
		}
	}
}

func mustProgram(t *testing.T, p Profile) []unix.SockFilter {
	t.Helper()
	prog, err := p.Program()
	if err != nil {
		t.Fatal(err)
	}
	validate(t, prog)
	return prog
}

const allow = unix.SECCOMP_RET_ALLOW

func fail(e syscall.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e) }

func verdictString(v uint32) string {
	if v == allow {
		return "ALLOW"
	}
	if v&unix.SECCOMP_RET_ACTION_FULL == unix.SECCOMP_RET_ERRNO {
		return "ERRNO(" + unix.ErrnoName(syscall.Errno(v&unix.SECCOMP_RET_DATA)) + ")"
	}
	return "0x" + strconv.FormatUint(uint64(v), 16)
}

type decision struct {
	name string
	c    call
	want uint32
}

// native builds a call in the running architecture's native ABI.
func native(nr uint32, args ...uint64) call {
	c := call{nr: nr, arch: nativeArch}
	copy(c.args[:], args)
	return c
}

// defaultDecisions hold for Default() in the native ABI of amd64 and arm64.
func defaultDecisions() []decision {
	const newUser, newNS, newTime = unix.CLONE_NEWUSER, unix.CLONE_NEWNS, unix.CLONE_NEWTIME
	threadFlags := uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND |
		unix.CLONE_THREAD | unix.CLONE_SYSVSEM | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID |
		unix.CLONE_CHILD_CLEARTID)
	return []decision{
		{"read", native(unix.SYS_READ, 0, 0, 0), allow},
		{"write", native(unix.SYS_WRITE, 1, 0, 0), allow},
		{"execve", native(unix.SYS_EXECVE), allow},
		{"getpid", native(unix.SYS_GETPID), allow},
		{"personality", native(unix.SYS_PERSONALITY, 0xffffffff), allow},
		{"clone_thread", native(unix.SYS_CLONE, threadFlags), allow},
		{"clone_fork", native(unix.SYS_CLONE, uint64(unix.SIGCHLD)), allow},
		{"clone_vfork_pidfd", native(unix.SYS_CLONE, unix.CLONE_VM|unix.CLONE_VFORK|unix.CLONE_PIDFD|uint64(unix.SIGCHLD)), allow},
		{"clone_newuser", native(unix.SYS_CLONE, newUser|uint64(unix.SIGCHLD)), fail(unix.EPERM)},
		{"clone_newnet", native(unix.SYS_CLONE, unix.CLONE_NEWNET), fail(unix.EPERM)},
		{"clone_newtime", native(unix.SYS_CLONE, newTime), fail(unix.EPERM)},
		{"clone_newuser_high_bits", native(unix.SYS_CLONE, 0xffffffff00000000|newUser), fail(unix.EPERM)},
		// The kernel uses only the low 32 bits of clone's flags.
		{"clone_newuser_only_in_high_word", native(unix.SYS_CLONE, newUser<<32), allow},
		{"clone3", native(unix.SYS_CLONE3, 0, 88), fail(unix.ENOSYS)},
		{"unshare_0", native(unix.SYS_UNSHARE, 0), allow},
		{"unshare_files", native(unix.SYS_UNSHARE, unix.CLONE_FILES|unix.CLONE_FS), allow},
		{"unshare_newns", native(unix.SYS_UNSHARE, newNS), fail(unix.EPERM)},
		{"unshare_newuser", native(unix.SYS_UNSHARE, newUser), fail(unix.EPERM)},
		{"unshare_newcgroup", native(unix.SYS_UNSHARE, unix.CLONE_NEWCGROUP), fail(unix.EPERM)},
		{"unshare_newtime", native(unix.SYS_UNSHARE, newTime), fail(unix.EPERM)},
		{"setns", native(unix.SYS_SETNS, 3, 0), fail(unix.EPERM)},
		{"ioctl_tiocsti", native(unix.SYS_IOCTL, 0, unix.TIOCSTI, 0), fail(unix.EPERM)},
		{"ioctl_tiocsti_high_bits", native(unix.SYS_IOCTL, 0, 0xffffffff00000000|unix.TIOCSTI, 0), fail(unix.EPERM)},
		{"ioctl_tioclinux", native(unix.SYS_IOCTL, 0, unix.TIOCLINUX, 0), fail(unix.EPERM)},
		{"ioctl_tcgets", native(unix.SYS_IOCTL, 0, unix.TCGETS, 0), allow},
		{"ioctl_tiocgwinsz", native(unix.SYS_IOCTL, 1, unix.TIOCGWINSZ, 0), allow},
		{"ioctl_tiocsti_as_fd", native(unix.SYS_IOCTL, unix.TIOCSTI, unix.TCGETS, 0), allow},
		{"keyctl", native(unix.SYS_KEYCTL, 0), fail(unix.EPERM)},
		{"add_key", native(unix.SYS_ADD_KEY), fail(unix.EPERM)},
		{"bpf", native(unix.SYS_BPF), fail(unix.EPERM)},
		{"perf_event_open", native(unix.SYS_PERF_EVENT_OPEN), fail(unix.EPERM)},
		{"userfaultfd", native(unix.SYS_USERFAULTFD), fail(unix.EPERM)},
		{"mount", native(unix.SYS_MOUNT), fail(unix.EPERM)},
		{"umount2", native(unix.SYS_UMOUNT2), fail(unix.EPERM)},
		{"fsopen", native(unix.SYS_FSOPEN), fail(unix.EPERM)},
		{"open_by_handle_at", native(unix.SYS_OPEN_BY_HANDLE_AT), fail(unix.EPERM)},
		{"finit_module", native(unix.SYS_FINIT_MODULE), fail(unix.EPERM)},
		{"kexec_file_load", native(unix.SYS_KEXEC_FILE_LOAD), fail(unix.EPERM)},
		{"io_uring_setup", native(unix.SYS_IO_URING_SETUP), fail(unix.ENOSYS)},
		{"io_uring_register", native(unix.SYS_IO_URING_REGISTER), fail(unix.ENOSYS)},
		{"syslog", native(unix.SYS_SYSLOG, 10), fail(unix.EPERM)},
		{"clock_settime", native(unix.SYS_CLOCK_SETTIME), fail(unix.EPERM)},
		{"unknown_arch_read", call{nr: unix.SYS_READ, arch: unix.AUDIT_ARCH_PPC64LE}, fail(unix.EPERM)},
		{"unknown_arch_zero", call{nr: 0, arch: 0}, fail(unix.EPERM)},
	}
}

func checkDecisions(t *testing.T, prog []unix.SockFilter, ds []decision) {
	t.Helper()
	for _, d := range ds {
		t.Run(d.name, func(t *testing.T) {
			if got, _ := run(t, prog, d.c); got != d.want {
				t.Errorf("nr %d arch %#x args %#x: got %s, want %s",
					d.c.nr, d.c.arch, d.c.args[:3], verdictString(got), verdictString(d.want))
			}
		})
	}
}

func TestDefaultDecisions(t *testing.T) {
	prog := mustProgram(t, Default())
	t.Logf("default program: %d instructions", len(prog))
	checkDecisions(t, prog, defaultDecisions())
	checkDecisions(t, prog, archDecisions())
}

// TestDefaultDeniesEveryListedCall runs every name in Default().Syscalls
// through the program in each ABI that has it.
func TestDefaultDeniesEveryListedCall(t *testing.T) {
	p := Default()
	prog := mustProgram(t, p)
	for _, b := range abis() {
		for _, s := range p.Syscalls {
			nr, ok := b.nr(s.Name)
			if !ok {
				continue
			}
			if got, _ := run(t, prog, call{nr: nr, arch: b.arch}); got != fail(s.Errno) {
				t.Errorf("arch %#x %s (%d): got %s, want %s", b.arch, s.Name, nr, verdictString(got), verdictString(fail(s.Errno)))
			}
		}
	}
}

// TestCacheable checks the claim in the package doc: only clone, unshare
// and ioctl make the filter read arguments, so the kernel's action cache
// can settle every other (nr, native arch) pair without running the filter.
func TestCacheable(t *testing.T) {
	prog := mustProgram(t, Default())
	inspected := map[uint32]bool{unix.SYS_CLONE: true, unix.SYS_UNSHARE: true, unix.SYS_IOCTL: true}
	for nr := uint32(0); nr < 1024; nr++ {
		for _, b := range abis() {
			c := call{nr: nr, arch: b.arch, args: [6]uint64{^uint64(0), ^uint64(0)}}
			_, readArgs := run(t, prog, c)
			if b.arch != nativeArch {
				continue // compat ABIs use different numbers
			}
			if readArgs != inspected[nr] {
				t.Errorf("nr %d: filter reads arguments = %v", nr, readArgs)
			}
		}
	}
}

func TestZeroProfile(t *testing.T) {
	prog := mustProgram(t, Profile{})
	checkDecisions(t, prog, []decision{
		{"keyctl", native(unix.SYS_KEYCTL), allow},
		{"clone_newuser", native(unix.SYS_CLONE, unix.CLONE_NEWUSER), allow},
		{"clone3", native(unix.SYS_CLONE3), allow},
		{"ioctl_tiocsti", native(unix.SYS_IOCTL, 0, unix.TIOCSTI), allow},
		{"unknown_arch", call{nr: unix.SYS_READ, arch: unix.AUDIT_ARCH_PPC64LE}, fail(unix.EPERM)},
	})
	checkDecisions(t, prog, zeroArchDecisions())
}

func TestCustomProfile(t *testing.T) {
	t.Run("errno", func(t *testing.T) {
		prog := mustProgram(t, Profile{Syscalls: []Syscall{
			{Name: "keyctl", Errno: unix.ENOSYS}, {Name: "ptrace"}, {Name: "bpf", Errno: unix.EACCES},
			{Name: "kcmp", Errno: unix.ENOSYS},
		}})
		checkDecisions(t, prog, []decision{
			{"keyctl", native(unix.SYS_KEYCTL), fail(unix.ENOSYS)},
			{"ptrace_zero_errno_is_eperm", native(unix.SYS_PTRACE), fail(unix.EPERM)},
			{"bpf", native(unix.SYS_BPF), fail(unix.EACCES)},
			{"kcmp", native(unix.SYS_KCMP), fail(unix.ENOSYS)},
			{"read", native(unix.SYS_READ), allow},
		})
	})
	t.Run("named_call_beats_argument_rules", func(t *testing.T) {
		prog := mustProgram(t, Profile{
			Syscalls:        []Syscall{{Name: "ioctl", Errno: unix.EACCES}, {Name: "clone"}, {Name: "clone3", Errno: unix.EACCES}},
			Ioctls:          []uint32{unix.TIOCSTI},
			NoNewNamespaces: true,
		})
		checkDecisions(t, prog, []decision{
			{"ioctl_tcgets", native(unix.SYS_IOCTL, 0, unix.TCGETS), fail(unix.EACCES)},
			{"ioctl_tiocsti", native(unix.SYS_IOCTL, 0, unix.TIOCSTI), fail(unix.EACCES)},
			{"clone_plain", native(unix.SYS_CLONE, uint64(unix.SIGCHLD)), fail(unix.EPERM)},
			{"clone3", native(unix.SYS_CLONE3), fail(unix.EACCES)},
			{"unshare_newns", native(unix.SYS_UNSHARE, unix.CLONE_NEWNS), fail(unix.EPERM)},
			{"unshare_0", native(unix.SYS_UNSHARE, 0), allow},
		})
	})
	t.Run("namespaces_only", func(t *testing.T) {
		prog := mustProgram(t, Profile{NoNewNamespaces: true})
		checkDecisions(t, prog, []decision{
			{"clone_newpid", native(unix.SYS_CLONE, unix.CLONE_NEWPID), fail(unix.EPERM)},
			{"clone3", native(unix.SYS_CLONE3), fail(unix.ENOSYS)},
			{"unshare_newipc", native(unix.SYS_UNSHARE, unix.CLONE_NEWIPC), fail(unix.EPERM)},
			{"ioctl_tiocsti", native(unix.SYS_IOCTL, 0, unix.TIOCSTI), allow},
			{"keyctl", native(unix.SYS_KEYCTL), allow},
		})
	})
}

// TestLongJumps builds programs whose blocks outgrow an 8-bit jump and
// checks that every jump still lands where it should.
func TestLongJumps(t *testing.T) {
	const n = 1500
	reqs := make([]uint32, n)
	for i := range reqs {
		reqs[i] = 0x10000 + uint32(i)
	}
	p := Default()
	p.Ioctls = append(p.Ioctls, reqs...)
	prog := mustProgram(t, p)
	long := 0
	for _, in := range prog {
		if in.Code == unix.BPF_JMP|unix.BPF_JA {
			long++
		}
	}
	if long == 0 {
		t.Fatal("no unconditional jumps: the test does not exercise long skips")
	}
	ds := []decision{
		{"first", native(unix.SYS_IOCTL, 0, 0x10000), fail(unix.EPERM)},
		// Default's two requests come first, so the first run of 255
		// tests ends at 0x10000+252.
		{"end_of_first_run", native(unix.SYS_IOCTL, 0, 0x10000+252), fail(unix.EPERM)},
		{"start_of_second_run", native(unix.SYS_IOCTL, 0, 0x10000+253), fail(unix.EPERM)},
		{"last", native(unix.SYS_IOCTL, 0, 0x10000+n-1), fail(unix.EPERM)},
		{"after_last", native(unix.SYS_IOCTL, 0, 0x10000+n), allow},
		{"tiocsti", native(unix.SYS_IOCTL, 0, unix.TIOCSTI), fail(unix.EPERM)},
		{"read", native(unix.SYS_READ), allow},
		{"keyctl", native(unix.SYS_KEYCTL), fail(unix.EPERM)},
		{"clone_newuser", native(unix.SYS_CLONE, unix.CLONE_NEWUSER), fail(unix.EPERM)},
	}
	checkDecisions(t, prog, append(ds, archDecisions()...))
}

func TestTooLong(t *testing.T) {
	p := Profile{Ioctls: make([]uint32, 5000)}
	for i := range p.Ioctls {
		p.Ioctls[i] = uint32(i)
	}
	_, err := p.Program()
	if err == nil || !strings.Contains(err.Error(), "limit of 4096") {
		t.Fatalf("Program() error = %v, want the instruction limit", err)
	}
}

func TestProgramRejectsInvalidProfile(t *testing.T) {
	_, err := Profile{Syscalls: []Syscall{{Name: "nope"}}}.Program()
	if err == nil || errors.Is(err, ErrUnsupportedArch) {
		t.Fatalf("Program() error = %v, want the profile rejected", err)
	}
}

func TestEncode(t *testing.T) {
	prog := mustProgram(t, Default())
	b := Encode(prog)
	if len(b) != 8*len(prog) {
		t.Fatalf("Encode gave %d bytes for %d instructions", len(b), len(prog))
	}
	for i, in := range prog {
		r := b[8*i:]
		got := unix.SockFilter{
			Code: binary.NativeEndian.Uint16(r[0:]),
			Jt:   r[2],
			Jf:   r[3],
			K:    binary.NativeEndian.Uint32(r[4:]),
		}
		if got != in {
			t.Fatalf("instruction %d encodes as %+v, want %+v", i, got, in)
		}
	}
	prog[0].K = 0xdeadbeef
	if binary.NativeEndian.Uint32(b[4:]) == 0xdeadbeef {
		t.Fatal("Encode returned memory shared with the program")
	}
	if Encode(nil) != nil {
		t.Fatal("Encode(nil) is not empty")
	}
}

// TestConstants ties the arch-neutral copies of kernel values to x/sys.
func TestConstants(t *testing.T) {
	if tiocsti != unix.TIOCSTI || tioclinux != unix.TIOCLINUX {
		t.Fatalf("tiocsti %#x tioclinux %#x; x/sys says %#x %#x", tiocsti, tioclinux, unix.TIOCSTI, unix.TIOCLINUX)
	}
	if newNamespaceFlags != 0x7e020080 {
		t.Fatalf("newNamespaceFlags = %#x", newNamespaceFlags)
	}
}

// catalogueNames are the names known accepts: those in Default plus the
// ones the argument rules need and a few more a Profile may name.
func catalogueNames() []string {
	names := []string{"clone", "clone3", "unshare", "ioctl", "ptrace", "process_vm_readv",
		"process_vm_writev", "kcmp", "personality"}
	for _, s := range Default().Syscalls {
		names = append(names, s.Name)
	}
	return names
}

// TestCatalogueResolves checks that every catalogued name resolves in some
// ABI of this architecture unless it is known to be absent here, so no rule
// silently vanishes everywhere.
func TestCatalogueResolves(t *testing.T) {
	names := catalogueNames()
	missing := map[string]bool{}
	for _, n := range archAbsent() {
		missing[n] = true
	}
	for _, name := range names {
		if !known(name) {
			t.Errorf("%s is not catalogued", name)
		}
		found := false
		for _, b := range abis() {
			if _, ok := b.nr(name); ok {
				found = true
			}
		}
		if found == missing[name] {
			t.Errorf("%s: resolves = %v, expected absent = %v", name, found, missing[name])
		}
	}
}

// parseHeader reads "#define __NR_name number" lines from the first of
// paths that exists.
func parseHeader(t *testing.T, paths ...string) map[string]uint32 {
	t.Helper()
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		nrs := map[string]uint32{}
		for line := range strings.Lines(string(b)) {
			f := strings.Fields(line)
			if len(f) != 3 || f[0] != "#define" || !strings.HasPrefix(f[1], "__NR_") {
				continue
			}
			if n, err := strconv.ParseUint(f[2], 10, 32); err == nil {
				nrs[strings.TrimPrefix(f[1], "__NR_")] = uint32(n)
			}
		}
		if len(nrs) < 300 {
			t.Fatalf("%s: only %d syscalls", p, len(nrs))
		}
		t.Logf("checking against %s (%d syscalls)", p, len(nrs))
		return nrs
	}
	t.Skipf("no kernel header among %q (install linux-libc-dev)", paths)
	return nil
}

// checkTable compares a name-to-number table with a kernel header: each
// catalogued name the header has must map to the header's number, and no
// name the header lacks may resolve.
func checkTable(t *testing.T, header map[string]uint32, nr func(string) (uint32, bool), extra []string) {
	t.Helper()
	for name, want := range header {
		got, ok := nr(name)
		switch {
		case ok && !known(name):
			t.Errorf("%s resolves but is not catalogued", name)
		case known(name) && !ok:
			t.Errorf("%s is catalogued and in the header (%d) but does not resolve", name, want)
		case ok && got != want:
			t.Errorf("%s = %d, header says %d", name, got, want)
		}
	}
	for _, name := range extra {
		if _, inHeader := header[name]; inHeader {
			continue
		}
		if got, ok := nr(name); ok {
			t.Errorf("%s resolves to %d but the header lacks it", name, got)
		}
	}
}

// BenchmarkDefaultProgram measures what compiling the default filter adds
// to a sandbox start.
func BenchmarkDefaultProgram(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		prog, err := Default().Program()
		if err != nil {
			b.Fatal(err)
		}
		_ = Encode(prog)
	}
}
