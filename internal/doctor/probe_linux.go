package doctor

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pinfold/pinfold/internal/preflight"
	"golang.org/x/sys/unix"
)

// The probes try things for real in child processes (see
// preflight.ProbeCmd): the Go process never unshares or mounts anything
// itself.

const (
	toolTimeout = 5 * time.Second  // podman/docker version
	infoTimeout = 15 * time.Second // podman info (may set up its storage)
)

// realProbeUnpriv runs "unshare --user --map-root-user --mount true" as
// uid and gid 65534 (nobody): the kernel's checks for ordinary users
// apply only when the process creating the namespace lacks privileges,
// so root cannot try this in a child of its own. It also catches AppArmor's
// restriction, which lets the namespace be created but refuses the id map.
func realProbeUnpriv(ctx context.Context) (bool, error) {
	un, err := preflight.LookTool("unshare")
	if err != nil {
		return false, nil
	}
	tr, err := preflight.LookTool("true")
	if err != nil {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, preflight.ProbeTimeout)
	defer cancel()
	cmd := preflight.ProbeCmd(ctx, un, "--user", "--map-root-user", "--mount", tr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	_, err = preflight.RunOut(cmd)
	return true, err
}

// overlayScript mounts an overlay ($1 lower, $2 upper, $3 work, $4
// merged) with mount(8) ($0), then checks that the lower file shows
// through and that a write lands in the upper directory only.
const overlayScript = `"$0" -t overlay overlay -o "lowerdir=$1,upperdir=$2,workdir=$3" "$4" || exit 1
read x < "$4/lower" || { echo "overlay: lower file not visible" >&2; exit 1; }
echo probe > "$4/upper" || exit 1
test -f "$2/upper" && ! test -e "$1/upper" || { echo "overlay: write did not reach the upper directory" >&2; exit 1; }`

// realProbeOverlay mounts an overlay of temporary directories in a new
// user and mount namespace, through sh(1) and mount(8) run as root of that
// namespace (mapped to this process's ids). The mount lives and dies with
// that namespace; mounts made there never propagate back to the host
// (a mount namespace owned by a new user namespace receives the host's
// mounts as slaves).
func (h *host) realProbeOverlay(ctx context.Context) (bool, error) {
	sh, err := preflight.LookTool("sh")
	if err != nil {
		return false, nil
	}
	mnt, err := preflight.LookTool("mount")
	if err != nil {
		return false, nil
	}
	tmp := os.TempDir()
	if strings.ContainsAny(tmp, ",:\\") {
		tmp = "/tmp"
	}
	dir, err := os.MkdirTemp(tmp, "pinfold-doctor-")
	if err != nil {
		return true, err
	}
	defer os.RemoveAll(dir)
	for _, d := range [...]string{"l", "u", "w", "m"} {
		if err := os.Mkdir(dir+"/"+d, 0o700); err != nil {
			return true, err
		}
	}
	if err := os.WriteFile(dir+"/l/lower", []byte("lower\n"), 0o600); err != nil {
		return true, err
	}
	ctx, cancel := context.WithTimeout(ctx, preflight.ProbeTimeout)
	defer cancel()
	cmd := preflight.ProbeCmd(ctx, sh, "-c", overlayScript, mnt, dir+"/l", dir+"/u", dir+"/w", dir+"/m")
	uids, gids := preflight.SelfMaps(h.EUID, unix.Getegid())
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS, UidMappings: uids, GidMappings: gids}
	_, err = preflight.RunOut(cmd)
	return true, preflight.UnwrapStart(err)
}

// realProbeIDMap clones the mount of dir (detached: it is never attached
// anywhere and goes away with its file descriptor) and idmaps the clone
// with the user namespace of a short-lived child, the way a root
// supervisor idmaps the workspace. EINVAL means dir's file system does not
// support idmapped mounts.
func realProbeIDMap(ctx context.Context, dir string) error {
	tree, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return &os.PathError{Op: "open_tree", Path: dir, Err: err}
	}
	defer unix.Close(tree)
	cat, err := preflight.LookTool("cat")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, preflight.ProbeTimeout)
	defer cancel()
	cmd := preflight.ProbeCmd(ctx, cat)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 1879048192, Size: 65536}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 1879048192, Size: 65536}},
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		in.Close()
		return preflight.UnwrapStart(err)
	}
	ns, err := unix.Open("/proc/"+strconv.Itoa(cmd.Process.Pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	in.Close()
	cmd.Wait()
	if err != nil {
		return err
	}
	defer unix.Close(ns)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(ns)}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return &os.PathError{Op: "mount_setattr", Path: dir, Err: err}
	}
	return nil
}

// pingDocker asks the docker daemon listening on the unix socket at path
// for GET /_ping, over a raw socket (no HTTP client is linked into
// pinfold), and returns the status line.
func pingDocker(path string, timeout time.Duration) (string, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(timeout.Nanoseconds())
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		return "", err
	}
	req := []byte("GET /_ping HTTP/1.1\r\nHost: docker\r\nUser-Agent: pinfold-doctor\r\nConnection: close\r\n\r\n")
	for len(req) > 0 {
		n, err := unix.Write(fd, req)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", err
		}
		req = req[n:]
	}
	var buf [512]byte
	got := 0
	for got < len(buf) {
		n, err := unix.Read(fd, buf[got:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			if err == unix.EAGAIN {
				err = errors.New("no answer within " + timeout.String())
			}
			return "", err
		}
		if n == 0 {
			break
		}
		got += n
		if bytes.IndexByte(buf[:got], '\n') >= 0 {
			break
		}
	}
	line, _, _ := strings.Cut(string(buf[:got]), "\n")
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "HTTP/1.") {
		return line, errors.New("not an HTTP answer: " + strconv.Quote(preflight.LastLine(line)))
	}
	if f := strings.Fields(line); len(f) < 2 || f[1] != "200" {
		return line, errors.New("the daemon answered " + strconv.Quote(line))
	}
	return line, nil
}
