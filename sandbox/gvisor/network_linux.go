package gvisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"

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
	if err := newNamespace(n.ns); err != nil {
		n.close()
		return nil, fmt.Errorf("setting up the sandbox's network: %w", err)
	}
	// The addresses and routes a native sandbox's device has; runsc
	// moves them into the Sentry.
	tun, err := netconf.TUN(n.ns)
	if err != nil {
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

// newNamespace makes a network namespace and keeps it at path (an nsfs
// bind mount).
func newNamespace(path string) error {
	ch := make(chan error, 1)
	go func() {
		// This thread enters the new namespace and comes back; one that
		// cannot come back stays locked, and ends with its goroutine.
		goruntime.LockOSThread()
		back, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			goruntime.UnlockOSThread()
			ch <- err
			return
		}
		defer back.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread()
			ch <- fmt.Errorf("a network namespace: %w", err)
			return
		}
		err = unix.Mount("/proc/thread-self/ns/net", path, "", unix.MS_BIND, "")
		if err != nil {
			err = fmt.Errorf("keeping the network namespace: %w", err)
		}
		if unix.Setns(int(back.Fd()), unix.CLONE_NEWNET) == nil {
			goruntime.UnlockOSThread()
		}
		ch <- err
	}()
	return <-ch
}
