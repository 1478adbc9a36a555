// Command attacker runs inside a sandbox during tests and tries to break
// out of it. Each probe prints one JSON line: {"probe":..., "err":...,
// "out":...}; "err" is the errno name when the attempt failed ("" when it
// worked). The tests decide what outcome is acceptable.
package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

type result struct {
	Probe string `json:"probe"`
	Err   string `json:"err"`
	Out   string `json:"out,omitempty"`
}

var enc = json.NewEncoder(os.Stdout)

func emit(probe string, err error, out string) {
	r := result{Probe: probe, Out: out}
	if err != nil {
		var en syscall.Errno
		if e, ok := err.(syscall.Errno); ok {
			en = e
		} else if pe, ok := err.(*os.PathError); ok {
			en, _ = pe.Err.(syscall.Errno)
		} else if se, ok := err.(*os.SyscallError); ok {
			en, _ = se.Err.(syscall.Errno)
		} else if oe, ok := err.(*net.OpError); ok {
			if se, ok := oe.Err.(*os.SyscallError); ok {
				en, _ = se.Err.(syscall.Errno)
			}
		}
		if en != 0 {
			r.Err = unix.ErrnoName(en)
		} else {
			r.Err = err.Error()
		}
	}
	enc.Encode(r)
}

func errno(r1 uintptr, e syscall.Errno) error {
	if e != 0 {
		return e
	}
	return nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: attacker PROBE [ARGS]")
		os.Exit(2)
	}
	arg := func(i int) string {
		if len(os.Args) > i {
			return os.Args[i]
		}
		return ""
	}
	switch os.Args[1] {
	case "read": // read FILE
		b, err := os.ReadFile(arg(2))
		emit("read "+arg(2), err, string(b))
	case "write": // write FILE
		err := os.WriteFile(arg(2), []byte("pwned\n"), 0o644)
		emit("write "+arg(2), err, "")
	case "stat":
		fi, err := os.Lstat(arg(2))
		out := ""
		if err == nil {
			st := fi.Sys().(*syscall.Stat_t)
			out = fmt.Sprintf("%d:%d:%o", st.Dev, st.Ino, st.Mode)
		}
		emit("stat "+arg(2), err, out)
	case "ls":
		ents, err := os.ReadDir(arg(2))
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		emit("ls "+arg(2), err, strings.Join(names, " "))
	case "procs": // pids visible in /proc
		ents, _ := os.ReadDir("/proc")
		var pids []string
		for _, e := range ents {
			if _, err := strconv.Atoi(e.Name()); err == nil {
				pids = append(pids, e.Name())
			}
		}
		emit("procs", nil, strings.Join(pids, " "))
	case "exes": // where every visible process's exe points
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if _, err := strconv.Atoi(e.Name()); err != nil {
				continue
			}
			p := "/proc/" + e.Name() + "/exe"
			link, lerr := os.Readlink(p)
			var st syscall.Stat_t
			serr := syscall.Stat(p, &st)
			out := link
			if serr == nil {
				out += fmt.Sprintf(" dev=%d ino=%d", st.Dev, st.Ino)
			}
			if lerr == nil {
				lerr = serr
			}
			emit("exe "+e.Name(), lerr, out)
			f, oerr := os.OpenFile(p, os.O_RDWR, 0)
			if f != nil {
				f.Close()
			}
			emit("exe-open-rw "+e.Name(), oerr, "")
		}
	case "kill": // kill PID SIG
		pid, _ := strconv.Atoi(arg(2))
		sig, _ := strconv.Atoi(arg(3))
		emit("kill "+arg(2), syscall.Kill(pid, syscall.Signal(sig)), "")
	case "ptrace": // ptrace PID
		pid, _ := strconv.Atoi(arg(2))
		_, _, e := syscall.RawSyscall(syscall.SYS_PTRACE, syscall.PTRACE_ATTACH, uintptr(pid), 0)
		emit("ptrace "+arg(2), errno(0, e), "")
	case "connect": // connect NETWORK ADDR
		c, err := net.Dial(arg(2), arg(3))
		if c != nil {
			c.Close()
		}
		emit("connect "+arg(2)+" "+arg(3), err, "")
	case "listen": // listen NETWORK ADDR
		l, err := net.Listen(arg(2), arg(3))
		if l != nil {
			l.Close()
		}
		emit("listen "+arg(2)+" "+arg(3), err, "")
	case "ifaces":
		ifs, err := net.Interfaces()
		var names []string
		for _, i := range ifs {
			names = append(names, i.Name)
		}
		emit("ifaces", err, strings.Join(names, " "))
	case "mount":
		emit("mount tmpfs", syscall.Mount("tmpfs", "/tmp", "tmpfs", 0, ""), "")
		emit("umount /proc", syscall.Unmount("/proc", syscall.MNT_DETACH), "")
		emit("remount / rw", syscall.Mount("", "/", "", syscall.MS_REMOUNT|syscall.MS_BIND, ""), "")
		emit("mount cgroup2", syscall.Mount("cgroup2", "/tmp", "cgroup2", 0, ""), "")
		emit("mount proc", syscall.Mount("proc", "/tmp", "proc", 0, ""), "")
		_, err := unix.Fsopen("tmpfs", 0)
		emit("fsopen", err, "")
		_, err = unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLONE)
		emit("open_tree", err, "")
	case "mknod":
		emit("mknod", syscall.Mknod("/tmp/sda", syscall.S_IFBLK|0o600, int(unix.Mkdev(8, 0))), "")
	case "keyctl":
		_, err := unix.KeyctlJoinSessionKeyring("pinfold")
		emit("keyctl", err, "")
		_, err = unix.AddKey("user", "pinfold", []byte("x"), unix.KEY_SPEC_PROCESS_KEYRING)
		emit("add_key", err, "")
	case "bpf":
		attr := make([]byte, 128)
		_, _, e := syscall.Syscall(unix.SYS_BPF, 0, uintptr(unsafe.Pointer(&attr[0])), 128)
		emit("bpf", errno(0, e), "")
	case "perf":
		attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK}
		attr.Size = uint32(unsafe.Sizeof(attr))
		fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, 0)
		if err == nil {
			unix.Close(fd)
		}
		emit("perf_event_open", err, "")
	case "userfaultfd":
		_, _, e := syscall.Syscall(unix.SYS_USERFAULTFD, 0, 0, 0)
		emit("userfaultfd", errno(0, e), "")
	case "tiocsti": // push a character into the terminal on fd 0 and on /dev/tty
		c := byte('x')
		_, _, e := syscall.Syscall(syscall.SYS_IOCTL, 0, unix.TIOCSTI, uintptr(unsafe.Pointer(&c)))
		emit("tiocsti stdin", errno(0, e), "")
		_, _, e = syscall.Syscall(syscall.SYS_IOCTL, 0, 0xffffffff00005412, uintptr(unsafe.Pointer(&c)))
		emit("tiocsti stdin high bits", errno(0, e), "")
		if f, err := os.OpenFile("/dev/tty", os.O_RDWR, 0); err != nil {
			emit("tiocsti /dev/tty", err, "")
		} else {
			_, _, e = syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), unix.TIOCSTI, uintptr(unsafe.Pointer(&c)))
			emit("tiocsti /dev/tty", errno(0, e), "")
		}
		_, _, e = syscall.Syscall(syscall.SYS_IOCTL, 0, unix.TIOCLINUX, uintptr(unsafe.Pointer(&c)))
		emit("tioclinux", errno(0, e), "")
	case "userns":
		emit("unshare user", syscall.Unshare(syscall.CLONE_NEWUSER), "")
		emit("unshare mount", syscall.Unshare(syscall.CLONE_NEWNS), "")
		emit("unshare net", syscall.Unshare(syscall.CLONE_NEWNET), "")
		var args [11]uint64
		args[0] = syscall.CLONE_NEWUSER
		_, _, e := syscall.RawSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(&args[0])), unsafe.Sizeof(args), 0)
		emit("clone3", errno(0, e), "")
		r1, _, e := syscall.RawSyscall6(syscall.SYS_CLONE, syscall.CLONE_NEWUSER|uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
		if e == 0 && r1 == 0 {
			os.Exit(0) // the child of a clone that should have failed
		}
		emit("clone newuser", errno(r1, e), "")
		_, _, e = syscall.RawSyscall(unix.SYS_SETNS, 0, 0, 0)
		emit("setns", errno(0, e), "")
	case "open_by_handle":
		fdcwd := unix.AT_FDCWD
		_, _, e := syscall.Syscall(unix.SYS_OPEN_BY_HANDLE_AT, uintptr(fdcwd), 0, 0)
		emit("open_by_handle_at", errno(0, e), "")
	case "hostname":
		emit("sethostname", syscall.Sethostname([]byte("pwned")), "")
	case "caps":
		b, _ := os.ReadFile("/proc/self/status")
		var out []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "Cap") || strings.HasPrefix(l, "NoNewPrivs") || strings.HasPrefix(l, "Seccomp:") ||
				strings.HasPrefix(l, "Uid") || strings.HasPrefix(l, "Gid") {
				out = append(out, strings.Join(strings.Fields(l), " "))
			}
		}
		emit("caps", nil, strings.Join(out, ";"))
	case "env":
		emit("env", nil, strings.Join(os.Environ(), "\n"))
	case "uname":
		var u syscall.Utsname
		err := syscall.Uname(&u)
		var b []byte
		for _, c := range u.Nodename {
			if c == 0 {
				break
			}
			b = append(b, byte(c))
		}
		emit("hostname", err, string(b))
	case "setuid-exec": // exec a setuid binary: no_new_privs must keep us unprivileged
		err := syscall.Exec(arg(2), []string{arg(2), "--version"}, os.Environ())
		emit("exec "+arg(2), err, "")
	case "mkdir":
		emit("mkdir "+arg(2), os.MkdirAll(arg(2), 0o755), "")
	case "symlink-escape": // create a link to / in the workspace and write through it
		dir := arg(2)
		link := filepath.Join(dir, "to-root")
		os.Remove(link)
		err := os.Symlink("/", link)
		if err == nil {
			err = os.WriteFile(filepath.Join(link, "etc", "pinfold-pwned"), []byte("x"), 0o644)
		}
		emit("symlink-escape", err, "")
	case "alloc": // alloc MB: touch that much memory, 1 MiB at a time
		mb, _ := strconv.Atoi(arg(2))
		var keep [][]byte
		for i := 0; i < mb; i++ {
			b := make([]byte, 1<<20)
			for j := 0; j < len(b); j += 4096 {
				b[j] = 1
			}
			keep = append(keep, b)
		}
		emit("alloc", nil, strconv.Itoa(len(keep)))
	case "cgroup":
		b, err := os.ReadFile("/proc/self/cgroup")
		emit("cgroup", err, string(b))
	default:
		fmt.Fprintln(os.Stderr, "unknown probe", os.Args[1])
		os.Exit(2)
	}
}
