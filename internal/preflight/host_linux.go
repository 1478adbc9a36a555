package preflight

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pinfold/pinfold/internal/cgroup"
	"golang.org/x/sys/unix"
)

// The probes try things for real in child processes: the Go process never
// unshares or mounts anything itself. Each child starts from "/" with a
// small fixed environment and is killed when its time is up.

// Host is where the checks look and how they try things for real. Tests
// replace the paths with a fake /proc tree and the probes with functions
// that fail the way a restricted host does; the real host's sysctls are
// never written by tests.
type Host struct {
	ProcSys string // /proc/sys
	Proc    string // /proc
	EUID    int

	// ProbeUserns creates the namespaces the native runtime uses, as
	// this process's user, in a child process.
	ProbeUserns func(ctx context.Context) error
	// Cgroups finds the host's cgroup hierarchies.
	Cgroups func() (*cgroup.System, error)
	// RunDir is the preflight cache directory; "" disables the cache.
	RunDir func(euid int) string
}

// NewHost is this host, probed for real.
func NewHost() *Host {
	h := &Host{
		ProcSys: "/proc/sys",
		Proc:    "/proc",
		EUID:    unix.Geteuid(),
		Cgroups: cgroup.Detect,
		RunDir:  defaultRunDir,
	}
	h.ProbeUserns = h.realProbeUserns
	return h
}

// defaultRunDir is /run/pinfold for root, $XDG_RUNTIME_DIR/pinfold for
// others, or "" (no cache) when XDG_RUNTIME_DIR is not an absolute path.
func defaultRunDir(euid int) string {
	if euid == 0 {
		return "/run/pinfold"
	}
	d := os.Getenv("XDG_RUNTIME_DIR")
	if len(d) == 0 || d[0] != '/' {
		return ""
	}
	return d + "/pinfold"
}

// ReadSmall reads a small file (a /proc entry) with one read.
func ReadSmall(path string) ([]byte, error) {
	return readInto(path, make([]byte, 4096))
}

// readInto reads path with one read into buf. A small buffer matters for
// /proc/sys files, where the kernel allocates the size asked for.
func readInto(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	n, err := unix.Read(fd, buf)
	for err == unix.EINTR {
		n, err = unix.Read(fd, buf)
	}
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// Sysctl reads an integer sysctl by its dotted name; ok is false when the
// kernel does not have it.
func (h *Host) Sysctl(name string) (v int64, ok bool) {
	b, err := ReadSmall(h.SysctlPath(name))
	if err != nil {
		return 0, false
	}
	v, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v, err == nil
}

// SysctlPath is the file of the sysctl name under ProcSys.
func (h *Host) SysctlPath(name string) string {
	return h.ProcSys + "/" + strings.ReplaceAll(name, ".", "/")
}

// Sysctls that decide who may create user namespaces.
const (
	sysMaxUserNS   = "user.max_user_namespaces"
	sysUnprivClone = "kernel.unprivileged_userns_clone"             // Debian and Ubuntu kernels
	sysAppArmor    = "kernel.apparmor_restrict_unprivileged_userns" // Ubuntu 23.10 and later
)

// SysctlChange is a sysctl value that would lift a restriction.
type SysctlChange struct {
	Name, Value string
	Why         string // what the current value does
}

// Blockers lists the sysctls that keep this user (or, with
// ordinary, users without privileges) from creating user namespaces.
// probeErr, the error of a real attempt, tells an exhausted limit apart.
func (h *Host) Blockers(ordinary bool, probeErr error) []SysctlChange {
	var ch []SysctlChange
	if v, ok := h.Sysctl(sysMaxUserNS); ok && (v == 0 || errors.Is(probeErr, unix.ENOSPC) && v < 15000) {
		why := sysMaxUserNS + " is " + strconv.FormatInt(v, 10)
		if v == 0 {
			why += ": nobody, not even root, may create user namespaces"
		} else {
			why += " and that many user namespaces exist"
		}
		ch = append(ch, SysctlChange{sysMaxUserNS, "15000", why})
	}
	if !ordinary {
		return ch
	}
	if v, ok := h.Sysctl(sysUnprivClone); ok && v == 0 {
		ch = append(ch, SysctlChange{sysUnprivClone, "1", sysUnprivClone + " is 0: only root may create user namespaces"})
	}
	if v, ok := h.Sysctl(sysAppArmor); ok && v != 0 {
		ch = append(ch, SysctlChange{sysAppArmor, "0", "AppArmor restricts user namespaces of unconfined programs (" + sysAppArmor + " is " + strconv.FormatInt(v, 10) + ")"})
	}
	return ch
}

// SysctlFix is the fix text for changes: the commands, and how to keep
// the values after a reboot.
func SysctlFix(ch []SysctlChange) string {
	var cmd, conf []string
	apparmor := false
	for _, c := range ch {
		cmd = append(cmd, "sysctl -w "+c.Name+"="+c.Value)
		conf = append(conf, c.Name+" = "+c.Value)
		apparmor = apparmor || c.Name == sysAppArmor
	}
	s := strings.Join(cmd, " && ") + "; to keep it after a reboot: printf '" + strings.Join(conf, "\\n") +
		"\\n' > /etc/sysctl.d/60-pinfold.conf"
	if apparmor {
		s += " (instead of lifting the AppArmor restriction for every program, you may give pinfold an AppArmor profile with the \"userns,\" rule)"
	}
	return s
}

// Whys joins what each change's current value does.
func Whys(ch []SysctlChange) string {
	w := make([]string, len(ch))
	for i, c := range ch {
		w[i] = c.Why
	}
	return strings.Join(w, "; ")
}

// AsWho names the user checks ran as.
func (h *Host) AsWho() string {
	if h.EUID == 0 {
		return "root"
	}
	return "uid " + strconv.Itoa(h.EUID)
}

// OneLine puts err on one line, naming cgroup.ErrUnsupported once.
func OneLine(err error) string {
	if err == nil {
		return ""
	}
	s := strings.ReplaceAll(err.Error(), "\n", "; ")
	return strings.ReplaceAll(s, "; "+cgroup.ErrUnsupported.Error()+": ", "; ")
}

// ProbeTimeout bounds each probe.
const ProbeTimeout = 5 * time.Second

// probeEnv is the environment of probe children.
var probeEnv = [...]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}

// constError is an error that can be a constant: no work at package
// initialisation.
type constError string

func (e constError) Error() string { return string(e) }

// ErrNoTool: a probe could not run because a host tool is missing.
const ErrNoTool = constError("tool not found")

// sandboxNS are the namespaces the native runtime creates.
const sandboxNS = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWNET

// LookTool finds a host tool in the usual system directories first, so a
// probe does not depend on the caller's PATH.
func LookTool(name string) (string, error) {
	for _, d := range [...]string{"/usr/bin/", "/bin/", "/usr/sbin/", "/sbin/", "/usr/local/bin/"} {
		if unix.Access(d+name, unix.X_OK) == nil {
			return d + name, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", ErrNoTool
}

// ProbeCmd is a child process for a probe.
func ProbeCmd(ctx context.Context, path string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = "/"
	cmd.Env = probeEnv[:]
	cmd.WaitDelay = time.Second
	return cmd
}

// RunOut runs cmd and returns its stdout; a failure carries the last line
// of its stderr.
func RunOut(cmd *exec.Cmd) (string, error) {
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		if line := LastLine(errb.String()); line != "" {
			err = errors.New(line)
		} else if line := LastLine(out.String()); line != "" {
			err = errors.New(line + " (" + err.Error() + ")")
		}
	}
	return strings.TrimSpace(out.String()), err
}

// LastLine is the last non-empty line of s, at most 300 bytes.
func LastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[i+1:])
	}
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// SelfMaps maps uid and gid to 0 in a new user namespace.
func SelfMaps(uid, gid int) ([]syscall.SysProcIDMap, []syscall.SysProcIDMap) {
	return []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
		[]syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}}
}

// realProbeUserns runs true(1) in the namespaces a sandbox gets, with
// this process's ids mapped to 0.
func (h *Host) realProbeUserns(ctx context.Context) error {
	tr, err := LookTool("true")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	cmd := ProbeCmd(ctx, tr)
	uids, gids := SelfMaps(h.EUID, unix.Getegid())
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: sandboxNS, UidMappings: uids, GidMappings: gids}
	_, err = RunOut(cmd)
	return UnwrapStart(err)
}

// UnwrapStart reduces "fork/exec /usr/bin/true: operation not permitted"
// to the errno, which is what the kernel said about the namespaces.
func UnwrapStart(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) && pe.Op == "fork/exec" {
		return pe.Err
	}
	return err
}

// UsernsCheck creates the sandbox's namespaces as this user.
func (h *Host) UsernsCheck(ctx context.Context) Check {
	c := Check{ID: "userns", Title: "user namespaces"}
	err := h.ProbeUserns(ctx)
	if err == nil {
		c.Status = Pass
		c.Detail = "created user, mount, pid, ipc, uts, cgroup and network namespaces as " + h.AsWho()
		return c
	}
	c.Status, c.Err = Fail, err
	if err == ErrNoTool {
		// Could not try: judge by the sysctls alone.
		c.Err = nil
		if ch := h.Blockers(h.EUID != 0, nil); len(ch) > 0 {
			c.Detail = "not tried (true(1) not found); " + Whys(ch)
			c.Fix, c.Fixable = SysctlFix(ch), h.EUID == 0
			c.Err = errors.New(c.Detail)
			return c
		}
		c.Status = Warn
		c.Detail = "not tried (true(1) not found); no sysctl forbids user namespaces"
		c.Fix = "install coreutils so pinfold doctor can try"
		return c
	}
	c.Detail = "creating namespaces as " + h.AsWho() + " failed: " + err.Error()
	if _, statErr := os.Stat(h.Proc + "/self/ns/user"); statErr != nil {
		c.Detail += "; this kernel has no user namespaces"
		c.Fix = "use a kernel built with CONFIG_USER_NS=y"
		return c
	}
	if ch := h.Blockers(h.EUID != 0, err); len(ch) > 0 {
		c.Detail += " (" + Whys(ch) + ")"
		c.Fix, c.Fixable = SysctlFix(ch), h.EUID == 0
		if h.EUID != 0 {
			c.Fix = "as root: " + c.Fix
		}
		return c
	}
	c.Fix = "no sysctl forbids it, so something else does: a container runtime's seccomp profile, " +
		"an LSM policy (AppArmor, SELinux), or a kernel option; run pinfold on the host or allow " +
		"unshare(CLONE_NEWUSER) in that policy"
	return c
}
