//go:build amd64 || arm64

package seccomp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The kernel test re-executes the test binary. The child's mode comes in
// this variable; the environment is otherwise empty, and the paths of the
// i386 programs to run come as arguments.
const childEnv = "PINFOLD_SECCOMP_TEST_CHILD"

const (
	modeFiltered = "filtered" // install Default() and run the probes
	modeBaseline = "baseline" // run the probes without a filter
	modeNoop     = "noop"     // exit at once; used to check fork and exec
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(childMain(mode, os.Args[1:]))
	}
	os.Exit(m.Run())
}

// probe is one system call the child makes. The arguments are chosen so
// that, should the filter let a call through, the kernel refuses it or it
// does no harm: paths that do not exist, bad descriptors, invalid flag
// combinations, read-only queries.
type probe struct {
	name string
	call func() error
	// want is the outcome under Default(): the errno, or 0 for success.
	want syscall.Errno
	// denied says the filter, not the kernel, produces want.
	denied bool
	// hostMayRefuse marks calls the host kernel might refuse with want by
	// itself (a kernel built without the feature, a sysctl), so that the
	// unfiltered baseline showing want proves nothing.
	hostMayRefuse bool
}

func sysErr(_, _ uintptr, e syscall.Errno) error {
	if e != 0 {
		return e
	}
	return nil
}

const (
	minus1  = ^uintptr(0)
	noPath  = "/nonexistent/pinfold-seccomp-test"
	x32Flag = 0x40000000
)

func probes() []probe {
	devNull := func(req uintptr) func() error {
		return func() error {
			fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return sysErr(unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, 0))
		}
	}
	eperm, enosys := syscall.EPERM, syscall.ENOSYS
	return []probe{
		// Ordinary work keeps working.
		{name: "getpid", call: func() error {
			if unix.Getpid() <= 0 {
				return errors.New("getpid returned nothing")
			}
			return nil
		}},
		{name: "open_read_file", call: func() error {
			b, err := os.ReadFile("/proc/self/cmdline")
			if err == nil && len(b) == 0 {
				err = errors.New("empty read")
			}
			return err
		}},
		{name: "unshare_0", call: func() error { return unix.Unshare(0) }},
		{name: "fork_exec", call: func() error {
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			cmd := exec.Command(exe)
			cmd.Env = []string{childEnv + "=" + modeNoop}
			return cmd.Run()
		}},
		{name: "personality_query", call: func() error {
			return sysErr(unix.Syscall(unix.SYS_PERSONALITY, 0xffffffff, 0, 0))
		}},
		// clone without CLONE_NEW* reaches the kernel: CLONE_SIGHAND
		// without CLONE_VM is invalid, so nothing is created either way.
		{name: "clone_invalid_no_ns", want: syscall.EINVAL, call: func() error {
			return sysErr(unix.RawSyscall6(unix.SYS_CLONE, unix.CLONE_SIGHAND, 0, 0, 0, 0, 0))
		}},
		{name: "ioctl_tcgets_devnull", want: syscall.ENOTTY, call: devNull(unix.TCGETS)},
		{name: "syscall_minus_1", want: syscall.ENOSYS, call: func() error {
			return sysErr(unix.RawSyscall(minus1, 0, 0, 0))
		}},

		// Denied.
		{name: "keyctl", want: eperm, denied: true, call: func() error {
			return sysErr(unix.Syscall6(unix.SYS_KEYCTL, 9999, 0, 0, 0, 0, 0))
		}},
		{name: "add_key", want: eperm, denied: true, call: func() error {
			return sysErr(unix.Syscall6(unix.SYS_ADD_KEY, 0, 0, 0, 0, 0, 0))
		}},
		{name: "request_key", want: eperm, denied: true, call: func() error {
			return sysErr(unix.Syscall6(unix.SYS_REQUEST_KEY, 0, 0, 0, 0, 0, 0))
		}},
		{name: "bpf", want: eperm, denied: true, call: func() error {
			return sysErr(unix.Syscall(unix.SYS_BPF, minus1, 0, 0))
		}},
		{name: "perf_event_open", want: eperm, denied: true, call: func() error {
			return sysErr(unix.Syscall6(unix.SYS_PERF_EVENT_OPEN, 0, 0, minus1, minus1, 0, 0))
		}},
		{name: "userfaultfd", want: eperm, denied: true, call: func() error {
			return sysErr(unix.Syscall(unix.SYS_USERFAULTFD, minus1, 0, 0))
		}},
		{name: "finit_module", want: eperm, denied: true, hostMayRefuse: true, call: func() error {
			return sysErr(unix.Syscall(unix.SYS_FINIT_MODULE, minus1, 0, 0))
		}},
		{name: "delete_module", want: eperm, denied: true, hostMayRefuse: true, call: func() error {
			return unix.DeleteModule("pinfold_no_such_module", unix.O_NONBLOCK)
		}},
		{name: "mount", want: eperm, denied: true, call: func() error {
			return unix.Mount("none", noPath, "tmpfs", 0, "")
		}},
		{name: "umount2", want: eperm, denied: true, call: func() error { return unix.Unmount(noPath, 0) }},
		{name: "pivot_root", want: eperm, denied: true, call: func() error { return unix.PivotRoot(noPath, noPath) }},
		{name: "fsopen", want: eperm, denied: true, call: func() error {
			_, err := unix.Fsopen("pinfold-no-such-fs", 0)
			return err
		}},
		{name: "open_tree", want: eperm, denied: true, call: func() error {
			_, err := unix.OpenTree(unix.AT_FDCWD, noPath, 0)
			return err
		}},
		{name: "open_by_handle_at", want: eperm, denied: true, call: func() error {
			return sysErr(unix.Syscall(unix.SYS_OPEN_BY_HANDLE_AT, minus1, 0, 0))
		}},
		{name: "setns", want: eperm, denied: true, call: func() error { return unix.Setns(-1, 0) }},
		{name: "unshare_newuser", want: eperm, denied: true, call: func() error { return unix.Unshare(unix.CLONE_NEWUSER) }},
		{name: "unshare_newns", want: eperm, denied: true, call: func() error { return unix.Unshare(unix.CLONE_NEWNS) }},
		{name: "unshare_newtime", want: eperm, denied: true, call: func() error { return unix.Unshare(unix.CLONE_NEWTIME) }},
		// Both flag pairs are invalid, so an unfiltered kernel refuses
		// them with EINVAL before creating anything.
		{name: "clone_newuser", want: eperm, denied: true, call: func() error {
			return sysErr(unix.RawSyscall6(unix.SYS_CLONE, unix.CLONE_NEWUSER|unix.CLONE_FS, 0, 0, 0, 0, 0))
		}},
		{name: "clone_newns", want: eperm, denied: true, call: func() error {
			return sysErr(unix.RawSyscall6(unix.SYS_CLONE, unix.CLONE_NEWNS|unix.CLONE_FS, 0, 0, 0, 0, 0))
		}},
		{name: "clone3", want: enosys, denied: true, call: func() error {
			return sysErr(unix.RawSyscall(unix.SYS_CLONE3, 0, 0, 0))
		}},
		{name: "ioctl_tiocsti_devnull", want: eperm, denied: true, call: devNull(unix.TIOCSTI)},
		{name: "ioctl_tiocsti_high_bits_devnull", want: eperm, denied: true, call: devNull(0xffffffff00000000 | unix.TIOCSTI)},
		{name: "ioctl_tioclinux_devnull", want: eperm, denied: true, call: devNull(unix.TIOCLINUX)},
		{name: "io_uring_setup", want: enosys, denied: true, hostMayRefuse: true, call: func() error {
			return sysErr(unix.Syscall(unix.SYS_IO_URING_SETUP, 1, 0, 0))
		}},
		{name: "io_uring_enter", want: enosys, denied: true, hostMayRefuse: true, call: func() error {
			return sysErr(unix.Syscall6(unix.SYS_IO_URING_ENTER, minus1, 0, 0, 0, 0, 0))
		}},
		// A wrong magic number makes an unfiltered reboot fail with EINVAL.
		{name: "reboot_bad_magic", want: eperm, denied: true, call: func() error {
			return sysErr(unix.Syscall6(unix.SYS_REBOOT, 0, 0, 0, 0, 0, 0))
		}},
		// A NULL path makes an unfiltered swapoff fail with EFAULT.
		{name: "swapoff_null", want: eperm, denied: true, call: func() error {
			return sysErr(unix.Syscall(unix.SYS_SWAPOFF, 0, 0, 0))
		}},
		// With both pointers NULL, settimeofday changes nothing.
		{name: "settimeofday_null", want: eperm, denied: true, call: func() error {
			return unix.Settimeofday(nil)
		}},
		// The monotonic clock cannot be set: EINVAL unfiltered.
		{name: "clock_settime_monotonic", want: eperm, denied: true, call: func() error {
			var ts unix.Timespec
			return unix.ClockSettime(unix.CLOCK_MONOTONIC, &ts)
		}},
		{name: "adjtimex_query", want: eperm, denied: true, call: func() error {
			var tx unix.Timex
			_, err := unix.Adjtimex(&tx)
			return err
		}},
		{name: "syslog_size", want: eperm, denied: true, call: func() error {
			_, err := unix.Klogctl(unix.SYSLOG_ACTION_SIZE_BUFFER, nil)
			return err
		}},
	}
}

// report is what the child prints.
type report struct {
	Errnos  map[string]int    // probe name to errno; 0 for success, -1 for another error
	Errors  map[string]string // text of the -1 cases
	Exits   map[string]int    // i386 program name to exit status, -1 or cannotExec
	Threads []threadState
}

type threadState struct {
	TID        string
	Seccomp    string // the Seccomp: line of /proc/self/task/TID/status
	NoNewPrivs string
}

// cannotExec reports that the kernel refused to execute a program (ENOEXEC).
const cannotExec = -2

func childMain(mode string, args []string) int {
	if mode == modeNoop {
		return 0
	}
	// Probes that change thread state, like unshare, stay on this thread.
	runtime.LockOSThread()

	// A thread that exists before the filter is installed, to check that
	// TSYNC reaches it.
	ready, ask, answer := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		runtime.LockOSThread()
		close(ready)
		<-ask
		answer <- sysErr(unix.Syscall6(unix.SYS_KEYCTL, 9999, 0, 0, 0, 0, 0))
	}()
	<-ready

	if mode == modeFiltered {
		prog, err := Default().Program()
		if err == nil {
			err = Install(prog)
		}
		if err != nil {
			os.Stderr.WriteString("child: " + err.Error() + "\n")
			return 3
		}
	}

	r := report{Errnos: map[string]int{}, Errors: map[string]string{}, Exits: map[string]int{}}
	record := func(name string, err error) {
		var e syscall.Errno
		switch {
		case err == nil:
			r.Errnos[name] = 0
		case errors.As(err, &e):
			r.Errnos[name] = int(e)
		default:
			r.Errnos[name] = -1
			r.Errors[name] = err.Error()
		}
	}
	for _, p := range append(probes(), archProbes()...) {
		record(p.name, p.call())
	}
	close(ask)
	record("keyctl_on_older_thread", <-answer)

	for _, arg := range args {
		name, path, _ := strings.Cut(arg, "=")
		err := exec.Command(path).Run()
		var exit *exec.ExitError
		switch {
		case err == nil:
			r.Exits[name] = 0
		case errors.As(err, &exit) && exit.Exited():
			r.Exits[name] = exit.ExitCode()
		case errors.Is(err, syscall.ENOEXEC):
			r.Exits[name] = cannotExec
			r.Errors[name] = err.Error()
		default:
			r.Exits[name] = -1
			r.Errors[name] = err.Error()
		}
	}

	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "status"))
		if err != nil {
			continue
		}
		st := threadState{TID: task.Name()}
		for line := range strings.Lines(string(b)) {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			switch k {
			case "Seccomp":
				st.Seccomp = strings.TrimSpace(v)
			case "NoNewPrivs":
				st.NoNewPrivs = strings.TrimSpace(v)
			}
		}
		r.Threads = append(r.Threads, st)
	}

	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		return 4
	}
	return 0
}

func runChild(t *testing.T, mode string, args []string) report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Args[0] = "pinfold-seccomp-child-" + mode
	cmd.Env = []string{childEnv + "=" + mode}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s child: %v\nstderr:\n%s", mode, err, stderr.String())
	}
	var r report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("%s child: %v\nstdout:\n%s", mode, err, stdout.String())
	}
	return r
}

func errnoString(n int) string {
	if n == 0 {
		return "success"
	}
	if n < 0 {
		return "error " + strconv.Itoa(n)
	}
	return unix.ErrnoName(syscall.Errno(n))
}

// TestKernel installs Default() in a re-executed child and makes real
// system calls there. As root, it also runs the same calls in an
// unfiltered child and checks that each denial came from the filter, not
// from the kernel refusing the call anyway.
func TestKernel(t *testing.T) {
	elfs, elfArgs := i386Programs(t)
	filtered := runChild(t, modeFiltered, elfArgs)
	var baseline *report
	if os.Geteuid() == 0 {
		b := runChild(t, modeBaseline, elfArgs)
		baseline = &b
	} else {
		t.Log("not root: skipping the unfiltered comparison, which needs privileges to mean anything")
	}

	all := append(probes(), archProbes()...)
	all = append(all, probe{name: "keyctl_on_older_thread", want: syscall.EPERM, denied: true})
	for _, p := range all {
		t.Run(p.name, func(t *testing.T) {
			got, ok := filtered.Errnos[p.name]
			if !ok {
				t.Fatal("no result")
			}
			if got != int(p.want) {
				t.Errorf("filtered: %s %s, want %s", errnoString(got), filtered.Errors[p.name], errnoString(int(p.want)))
			}
			if baseline == nil {
				return
			}
			base := baseline.Errnos[p.name]
			switch {
			case p.denied && base == int(p.want) && p.hostMayRefuse:
				t.Logf("unfiltered kernel also gives %s; the comparison proves nothing here", errnoString(base))
			case p.denied && base == int(p.want):
				t.Errorf("unfiltered kernel also gives %s, so the probe does not show the filter at work", errnoString(base))
			case !p.denied && base != got:
				t.Errorf("unfiltered %s but filtered %s: the filter changed an allowed call", errnoString(base), errnoString(got))
			}
		})
	}

	t.Run("all_threads_filtered", func(t *testing.T) {
		if len(filtered.Threads) < 2 {
			t.Fatalf("child had %d threads; TSYNC is not exercised", len(filtered.Threads))
		}
		for _, th := range filtered.Threads {
			if th.Seccomp != "2" || th.NoNewPrivs != "1" {
				t.Errorf("thread %s: Seccomp %q NoNewPrivs %q, want 2 and 1", th.TID, th.Seccomp, th.NoNewPrivs)
			}
		}
		t.Logf("%d threads, all in filter mode", len(filtered.Threads))
	})

	t.Run("i386", func(t *testing.T) {
		if len(elfs) == 0 {
			t.Skip("no 32-bit x86 ABI on this architecture")
		}
		for _, e := range elfs {
			if filtered.Exits[e.name] == cannotExec {
				t.Skipf("the kernel does not run 32-bit x86 programs (IA32 emulation disabled, e.g. ia32_emulation=0 "+
					"or CONFIG_IA32_EMULATION_DEFAULT_DISABLED): %s; the interpreter tests cover the i386 rules",
					filtered.Errors[e.name])
			}
		}
		for _, e := range elfs {
			t.Run(e.name, func(t *testing.T) {
				got, ok := filtered.Exits[e.name]
				if !ok || got == -1 {
					t.Fatalf("did not run: %s", filtered.Errors[e.name])
				}
				if got != int(e.want) {
					t.Errorf("filtered: %s, want %s", errnoString(got), errnoString(int(e.want)))
				}
				if baseline == nil {
					return
				}
				base := baseline.Exits[e.name]
				if e.denied && base == int(e.want) {
					t.Errorf("unfiltered also gives %s", errnoString(base))
				}
				if !e.denied && base != got {
					t.Errorf("unfiltered %s but filtered %s", errnoString(base), errnoString(got))
				}
			})
		}
	})
}

func TestInstallRejectsBadLength(t *testing.T) {
	if err := Install(nil); err == nil {
		t.Fatal("Install(nil) succeeded")
	}
	if err := Install(make([]unix.SockFilter, unix.BPF_MAXINSNS+1)); err == nil {
		t.Fatal("Install accepted an over-long program")
	}
}
