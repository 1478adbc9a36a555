package gvisor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/internal/netpolicy"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/internal/netconf"
)

// A network is what a run with pinfold's network (outbound, allow,
// published ports) gets: a network namespace of its own, kept by a bind
// mount of its nsfs file in the bundle, whose only device is a TUN device
// served by pinfold's network stack (the helper a native sandbox has: its
// DNS server, allow-list and violation log). runsc --network=sandbox
// joins that namespace (the bundle's network namespace path), takes the
// device's addresses and routes into the Sentry's own network stack and
// exchanges the command's packets with the device on a packet socket, so
// that everything the command sends reaches pinfold's stack and nothing
// else: gVisor's netstack never reaches the host's network itself.
type network struct {
	ns    string // the namespace's nsfs file, bind-mounted
	stack *netpolicy.Stack
}

// startNetwork makes the network of one run in dir (the bundle).
func (s *Sandbox) startNetwork(ctx context.Context, cfg *netpolicy.Config, dir string) (*network, error) {
	n := &network{ns: filepath.Join(dir, "netns")}
	if err := os.WriteFile(n.ns, nil, 0o600); err != nil {
		return nil, err
	}
	// The helper starts while the namespace is made.
	st, err := netpolicy.Launch(*cfg, s.rt.store)
	if err != nil {
		return nil, err
	}
	n.stack = st
	tun, err := newNamespace(n.ns)
	if err != nil {
		n.close()
		return nil, fmt.Errorf("setting up the sandbox's network: %w", err)
	}
	if err := configure(n.ns); err != nil {
		tun.Close()
		n.close()
		return nil, fmt.Errorf("setting up the sandbox's network: %w", err)
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

// close ends the stack (its violations stay readable) and lets the
// namespace go.
func (n *network) close() {
	if n.stack != nil {
		n.stack.Close()
	}
	unix.Unmount(n.ns, unix.MNT_DETACH)
}

// violations are the stack's reports, once closed.
func (n *network) violations() []sandbox.Violation {
	vs := netconf.Violations(n.stack.Violations())
	if err := n.stack.Err(); err != nil {
		vs = append(vs, sandbox.Violation{Kind: "network", Reason: "the sandbox had no network: " + err.Error()})
	}
	return vs
}

// newNamespace makes a network namespace, keeps it at path (an nsfs bind
// mount) and creates in it the TUN device eth0, whose descriptor it
// returns.
func newNamespace(path string) (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// This thread enters the new namespace and comes back; one that
		// cannot come back stays locked, and ends with its goroutine.
		goruntime.LockOSThread()
		back, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			goruntime.UnlockOSThread()
			ch <- result{nil, err}
			return
		}
		defer back.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread()
			ch <- result{nil, fmt.Errorf("a network namespace: %w", err)}
			return
		}
		f, err := func() (*os.File, error) {
			if err := unix.Mount("/proc/thread-self/ns/net", path, "", unix.MS_BIND, ""); err != nil {
				return nil, fmt.Errorf("keeping the network namespace: %w", err)
			}
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
		if unix.Setns(int(back.Fd()), unix.CLONE_NEWNET) == nil {
			goruntime.UnlockOSThread()
		}
		ch <- result{f, err}
	}()
	r := <-ch
	return r.f, r.err
}

// configure gives the namespace's device the addresses and routes a
// native sandbox's has; runsc moves them into the Sentry.
// IPv6 is given where the host leaves it enabled in a new namespace.
func configure(ns string) error {
	ip := func(batch string) error {
		cmd := exec.Command("nsenter", "--net="+ns, "ip", "-batch", "-")
		cmd.Stdin = strings.NewReader(batch)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("configuring the device (ip -batch): %v: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := ip(fmt.Sprintf("link set lo up\nlink set eth0 mtu %d up\naddr add %s/%d dev eth0\nroute add 0.0.0.0/0 dev eth0\n",
		netpolicy.MTU, netpolicy.SandboxAddr, netpolicy.Prefix4)); err != nil {
		return err
	}
	ip(fmt.Sprintf("addr add %s/%d dev eth0 nodad\nroute add ::/0 dev eth0 metric 1\n", netpolicy.SandboxAddr6, netpolicy.Prefix6))
	return nil
}
