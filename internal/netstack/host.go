package netstack

import (
	"context"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"

	"github.com/pinfold/pinfold/internal/netpolicy"
)

// hostAddrs knows the host's own addresses, on every interface, read
// again at most every refresh: a name that resolves to one of them would
// reach the host's services bound to 0.0.0.0 or ::.
type hostAddrs struct {
	mu    sync.Mutex
	addrs map[netip.Addr]bool
	read  time.Time
}

const refresh = 2 * time.Second

func (h *hostAddrs) load() {
	m := map[netip.Addr]bool{}
	if as, err := net.InterfaceAddrs(); err == nil {
		for _, a := range as {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				m[p.Addr().Unmap().WithZone("")] = true
			}
		}
	}
	h.addrs, h.read = m, time.Now()
}

// has reports whether a is one of the host's addresses (v4-mapped ones
// too).
func (h *hostAddrs) has(a netip.Addr) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if time.Since(h.read) > refresh {
		h.load()
	}
	return h.addrs[a.Unmap().WithZone("")]
}

// hostResolvers reads the nameservers of a resolv.conf.
func hostResolvers(path string) []netip.AddrPort {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []netip.AddrPort
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil {
				out = append(out, netip.AddrPortFrom(a.WithZone(""), 53))
			}
		}
	}
	return out
}

// publish listens on p.Host and connects each connection to p.Port in the
// sandbox, from the host's address on the link.
func (s *Server) publish(p netpolicy.Publish) error {
	l, err := net.Listen("tcp", p.Host.String())
	if err != nil {
		return err
	}
	if !s.onClose(func() { l.Close() }) {
		l.Close()
		return errClosed
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				if s.ctx.Err() != nil {
					return
				}
				time.Sleep(10 * time.Millisecond)
				continue
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.connectIn(c.(*net.TCPConn), p.Port)
			}()
		}
	}()
	return nil
}

// connectIn connects a published connection to port inside the sandbox.
func (s *Server) connectIn(c *net.TCPConn, port uint16) {
	ctx, cancel := context.WithTimeout(s.ctx, dialTimeout)
	defer cancel()
	local := tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFrom4(netpolicy.HostAddr.As4())}
	remote := fullAddr(netip.AddrPortFrom(netpolicy.SandboxAddr, port))
	in, err := gonet.DialTCPWithBind(ctx, s.st, local, remote, proto(netpolicy.SandboxAddr))
	if err != nil {
		c.Close()
		return
	}
	s.spliceIn(in, c)
}

// spliceIn copies both ways between a published connection and the
// sandbox.
func (s *Server) spliceIn(in *gonet.TCPConn, c *net.TCPConn) {
	s.splice(in, c)
}
