package netconf

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/internal/netpolicy"
)

// TUN creates the device eth0 in the network namespace ns (a path to its
// nsfs file: /proc/PID/ns/net, or a bind mount of one) and gives it the
// addresses and routes a native sandbox's has (the native init sets them
// itself), for the runtimes whose namespace is made by another program
// (runsc, a container engine). It returns the device's descriptor, which
// pinfold's stack serves. IPv6 is given where the namespace has it.
func TUN(ns string) (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// This thread enters the namespace and comes back. It must not
		// end while it can: the network helper's parent-death signal may
		// be tied to it (it fires when the thread that started the
		// helper exits). One that cannot come back stays locked, and
		// ends with its goroutine.
		runtime.LockOSThread()
		back, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, err}
			return
		}
		defer back.Close()
		f, err := func() (*os.File, error) {
			target, err := os.Open(ns)
			if err != nil {
				return nil, err
			}
			defer target.Close()
			if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
				return nil, fmt.Errorf("entering the sandbox's network namespace: %w", err)
			}
			defer func() {
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
		r.f.Close()
		return nil, err
	}
	// Without IPv6 in the namespace (docker turns it off in a container
	// without a network) this fails, and the sandbox has IPv4 only.
	ip(fmt.Sprintf("addr add %s/%d dev eth0 nodad\nroute add ::/0 dev eth0 metric 1\n", netpolicy.SandboxAddr6, netpolicy.Prefix6))
	return r.f, nil
}
