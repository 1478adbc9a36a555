package container

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pinfold/pinfold/internal/netpolicy"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/internal/netconf"
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
	sock   string // docker's socket, when the holder was made through its API
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
	args = append(args, "-v", Tini+":/.pinfold/tini:ro", "--entrypoint", "/.pinfold/tini", "--pull=never")
	hcmd := []string{"-s", "--", "sleep", "infinity"}
	pid, ok, err := s.holderViaAPI(n, args[2:], img, hcmd)
	if err != nil {
		n.close()
		return nil, err
	}
	if !ok {
		holder := exec.CommandContext(ctx, s.rt.bin, append(append(args, img), hcmd...)...)
		// In the run's own directory: the holder's conmon starts in the
		// client's, and must neither write to nor keep busy the caller's.
		holder.Dir = dir
		if out, err := holder.CombinedOutput(); err != nil {
			n.close()
			return nil, &engineError{engine: s.rt.engine, detail: "starting the network holder: " + firstLine(string(out))}
		}
		out, err := exec.CommandContext(ctx, s.rt.bin, "inspect", "--format", "{{.State.Pid}}", n.holder).Output()
		var perr error
		pid, perr = strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil || perr != nil || pid <= 0 {
			n.close()
			return nil, &engineError{engine: s.rt.engine, detail: "finding the network holder's process"}
		}
	}
	st, err := netpolicy.Launch(*cfg, s.rt.store)
	if err != nil {
		n.close()
		return nil, err
	}
	n.stack = st
	tun, err := netconf.TUN(fmt.Sprintf("/proc/%d/ns/net", pid))
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
	if n.sock != "" {
		call(context.Background(), n.sock, "DELETE", "/containers/"+n.holder+"?force=1&v=1", nil, nil)
	} else {
		exec.Command(n.rt.bin, "rm", "-f", "-v", n.holder).Run()
	}
	if n.dir != "" {
		os.RemoveAll(n.dir)
	}
}
