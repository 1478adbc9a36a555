package container

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/internal/netpolicy"
	"github.com/pinfold/pinfold/sandbox"
)

// A network is what a container with pinfold's network (outbound, allow,
// published ports) runs in: a holder container that owns a network
// namespace with pinfold's TUN device, served by the same stack a native
// sandbox has, and a resolv.conf naming pinfold's DNS server. The
// command's container joins the holder's namespace (--network
// container:NAME), which both engines support.
type network struct {
	rt     *Runtime
	holder string
	dir    string // resolv.conf
	stack  *netpolicy.Stack
}

// startNetwork makes a network for cfg.
func (s *Sandbox) startNetwork(ctx context.Context, cfg *netpolicy.Config) (*network, error) {
	n := &network{rt: s.rt, holder: "pinfold-net-" + randomID()}
	dir, err := workDir(s.rt.store)
	if err != nil {
		return nil, err
	}
	n.dir = dir
	resolv := "nameserver " + netpolicy.DNSAddr.String() + "\n"
	if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte(resolv), 0o644); err != nil {
		n.close()
		return nil, err
	}
	// The holder: the host's skeleton and its sleep, nothing else.
	img, binds, err := s.rt.skeleton(ctx, "/", sandbox.HostSystemDirs(), s.rt.store)
	if err != nil {
		n.close()
		return nil, err
	}
	args := []string{"run", "-d", "--rm", "--name", n.holder, "--label", Label + "=" + Owner(), "--network", "none",
		"--hostname", s.spec.Hostname, "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"}
	args = append(args, s.rt.extra...)
	if os.Geteuid() == 0 {
		args = append(args, rootIDArgs(s.rt.engine)...) // not host root either
	}
	for _, b := range binds {
		args = append(args, "-v", b+":"+b+":ro")
	}
	args = append(args, "-v", Tini+":/.pinfold/tini:ro", "--entrypoint", "/.pinfold/tini", "--pull=never",
		img, "-s", "--", "sleep", "infinity")
	holder := exec.CommandContext(ctx, s.rt.bin, args...)
	// In the run's own directory: the holder's conmon starts in the
	// client's, and must neither write to nor keep busy the caller's.
	holder.Dir = dir
	if out, err := holder.CombinedOutput(); err != nil {
		n.close()
		return nil, &engineError{engine: s.rt.engine, detail: "starting the network holder: " + firstLine(string(out))}
	}
	out, err := exec.CommandContext(ctx, s.rt.bin, "inspect", "--format", "{{.State.Pid}}", n.holder).Output()
	pid, perr := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || perr != nil || pid <= 0 {
		n.close()
		return nil, &engineError{engine: s.rt.engine, detail: "finding the network holder's process"}
	}
	st, err := netpolicy.Launch(*cfg, s.rt.store)
	if err != nil {
		n.close()
		return nil, err
	}
	n.stack = st
	tun, err := makeTUN(pid)
	if err != nil {
		n.close()
		return nil, fmt.Errorf("setting up the container's network: %w", err)
	}
	if err := st.Attach(tun); err != nil {
		n.close()
		return nil, err
	}
	if len(cfg.Publish) > 0 {
		if err := st.Ready(ctx); err != nil {
			n.close()
			return nil, err
		}
	}
	return n, nil
}

// args are the command container's network flags.
func (n *network) args() []string {
	return []string{"--network", "container:" + n.holder, "-v", filepath.Join(n.dir, "resolv.conf") + ":/etc/resolv.conf:ro"}
}

// close ends the holder and the stack; the violations stay readable.
func (n *network) close() {
	if n.stack != nil {
		n.stack.Close()
	}
	exec.Command(n.rt.bin, "rm", "-f", "-v", n.holder).Run()
	if n.dir != "" {
		os.RemoveAll(n.dir)
	}
}

// makeTUN creates the TUN device in the network namespace of process pid
// and gives it the addresses and routes a native sandbox's has.
func makeTUN(pid int) (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// This thread enters the namespace and comes back. It must not
		// end: the network helper's parent-death signal may be tied to
		// it (it fires when the thread that started the helper exits).
		runtime.LockOSThread()
		back, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- result{nil, err}
			runtime.UnlockOSThread()
			return
		}
		defer back.Close()
		f, err := func() (*os.File, error) {
			ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
			if err != nil {
				return nil, err
			}
			defer ns.Close()
			if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
				return nil, fmt.Errorf("entering the container's network namespace: %w", err)
			}
			defer func() {
				// A thread that cannot come back stays locked, and ends.
				if unix.Setns(int(back.Fd()), unix.CLONE_NEWNET) == nil {
					runtime.UnlockOSThread()
				}
			}()
			fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, fmt.Errorf("/dev/net/tun: %w", err)
			}
			ifr, _ := unix.NewIfreq("eth0")
			ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
			if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
				unix.Close(fd)
				return nil, fmt.Errorf("creating the device: %w", err)
			}
			return os.NewFile(uintptr(fd), "tun"), nil
		}()
		ch <- result{f, err}
	}()
	r := <-ch
	if r.err != nil {
		return nil, r.err
	}
	// Addresses and routes, as the native init gives them. IPv6 is given
	// where the engine left it enabled (docker turns it off in a
	// container without a network).
	ip := func(batch string) error {
		cmd := exec.Command("nsenter", "--net=/proc/"+strconv.Itoa(pid)+"/ns/net", "ip", "-batch", "-")
		cmd.Stdin = strings.NewReader(batch)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("configuring the device (ip -batch): %v: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := ip(fmt.Sprintf("link set lo up\nlink set eth0 mtu %d up\naddr add %s/%d dev eth0\nroute add 0.0.0.0/0 dev eth0\n",
		netpolicy.MTU, netpolicy.SandboxAddr, netpolicy.Prefix4)); err != nil {
		r.f.Close()
		return nil, err
	}
	ip(fmt.Sprintf("addr add %s/%d dev eth0 nodad\nroute add ::/0 dev eth0 metric 1\n", netpolicy.SandboxAddr6, netpolicy.Prefix6))
	return r.f, nil
}
