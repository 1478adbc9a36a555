// Package netstack serves a sandbox's TUN device with gVisor's userspace
// TCP/IP stack: every TCP connection, UDP flow and ping the sandbox starts
// ends here, and goes on from the host's own sockets only when the
// netpolicy.Policy allows it. TCP connections to addresses an allowed name
// resolved to pass through a netpolicy.Guard, which checks the TLS server
// name or the Host of every HTTP request before the upstream connection is
// opened and before a byte reaches it. DNS for the sandbox is pinfold's own
// server (netpolicy.Policy.Resolve), and published ports are dialled into
// the sandbox through the stack.
//
// It runs in the pinfold-net helper process (cmd/pinfold-net, see Main),
// never in pinfold itself: gVisor's packages cost every process that links
// them their initialisation.
package netstack

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/fdbased"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/pinfold/pinfold/internal/netpolicy"
)

const nicID = 1

// Server is a running stack.
type Server struct {
	pol      *netpolicy.Policy
	st       *stack.Stack
	tunFD    int
	stopFDs  []int // fdbased's, closed once the stack has stopped
	reading  bool  // counted in attached
	upstream []netip.AddrPort
	hosts    *hostAddrs

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	guards sync.WaitGroup // the guards reading what the sandbox sent
	// waking is the goroutine of AttachOnTraffic, which Close waits for
	// before it stops the stack that goroutine may have built.
	waking sync.WaitGroup

	mu        sync.Mutex
	closers   []func()
	closed    bool
	dnsSlots  chan struct{}
	echoFlows map[echoKey]*echoFlow
}

// Serve starts serving the sandbox whose TUN device is tunFD (Serve owns
// it) under pol, until Close.
func Serve(pol *netpolicy.Policy, tunFD int) (*Server, error) {
	s := New(pol)
	if err := s.Attach(tunFD); err != nil {
		s.Close()
		unix.Close(tunFD)
		return nil, err
	}
	return s, nil
}

// New prepares a stack for pol; Attach builds it and serves the device.
func New(pol *netpolicy.Policy) *Server {
	cfg := pol.Config()
	s := &Server{pol: pol, tunFD: -1, dnsSlots: make(chan struct{}, maxDNSInFlight), echoFlows: map[echoKey]*echoFlow{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.hosts = &hostAddrs{} // read on first use
	pol.HostAddr = s.hosts.has
	s.upstream = cfg.DNS
	if len(s.upstream) == 0 {
		s.upstream = hostResolvers("/etc/resolv.conf")
	}
	return s
}

// newStack builds gVisor's stack.
func newStack() *stack.Stack {
	st := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	sack := tcpip.TCPSACKEnabled(true)
	st.SetTransportProtocolOption(tcp.ProtocolNumber, &sack)
	// Large buffers: the link is a local kernel, fast and lossless.
	st.SetTransportProtocolOption(tcp.ProtocolNumber, &tcpip.TCPReceiveBufferSizeRangeOption{Min: 4096, Default: 1 << 20, Max: 8 << 20})
	st.SetTransportProtocolOption(tcp.ProtocolNumber, &tcpip.TCPSendBufferSizeRangeOption{Min: 4096, Default: 1 << 20, Max: 8 << 20})
	return st
}

// AttachOnTraffic is Attach, deferred until the sandbox first sends a
// packet (which waits in the device's queue meanwhile): most commands
// never use the network, and a stack and its reader per sandbox are most
// of what a run costs the helper. The caller closes tunFD after Close,
// as with Attach.
func (s *Server) AttachOnTraffic(tunFD int) error {
	if len(s.pol.Config().Publish) > 0 {
		// Published ports dial into the sandbox from the start.
		return s.Attach(tunFD)
	}
	if err := unix.SetNonblock(tunFD, true); err != nil {
		return fmt.Errorf("the TUN device: %w", err)
	}
	// A duplicate waits in the runtime's poller, which takes no thread:
	// closing it (below, or by Close) leaves tunFD as it was.
	dup, err := unix.FcntlInt(uintptr(tunFD), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("the TUN device: %w", err)
	}
	f := os.NewFile(uintptr(dup), "tun")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return fmt.Errorf("the TUN device: %w", err)
	}
	if !s.onClose(func() { f.Close() }) {
		f.Close()
		return errClosed
	}
	s.waking.Add(1)
	go func() {
		defer s.waking.Done()
		err := rc.Read(func(fd uintptr) bool {
			p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, _ := unix.Poll(p, 0)
			return n > 0
		})
		f.Close()
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if err != nil || closed {
			return
		}
		// Close waits for this goroutine before stopping the stack.
		if err := s.Attach(tunFD); err != nil {
			fmt.Fprintln(os.Stderr, "pinfold-net:", err)
		}
	}()
	return nil
}

// Attach serves the sandbox whose TUN device is tunFD until Close; the
// caller closes tunFD after Close (or after a failed Attach).
func (s *Server) Attach(tunFD int) error {
	cfg := s.pol.Config()
	s.tunFD = tunFD
	st := newStack()
	s.mu.Lock()
	s.st = st
	s.mu.Unlock()
	// The default packet processors (GOMAXPROCS goroutines per sandbox):
	// with one, the device's reader processed each packet itself and an
	// upload cost the helper a quarter more CPU per byte (it went back to
	// ppoll between packets).
	link, err := fdbased.New(&fdbased.Options{FDs: []int{tunFD}, MTU: netpolicy.MTU, EthernetHeader: false,
		RXChecksumOffload: true, TXChecksumOffload: false})
	if err != nil {
		return fmt.Errorf("the TUN device: %v", err)
	}
	s.mu.Lock()
	s.stopFDs = stopFDs(link)
	s.mu.Unlock()
	tap := &echoTap{s: s}
	tap.Endpoint.Init(link, tap)
	if e := s.st.CreateNIC(nicID, tap); e != nil {
		return fmt.Errorf("the stack's interface: %v", e)
	}
	time.Sleep(time.Duration(configureDelay.Load()))
	s.mu.Lock()
	s.reading = true // its reader holds a thread (see shedThreads)
	attached.Add(1)
	s.mu.Unlock()
	// The stack answers for every address: it is the whole network the
	// sandbox sees (promiscuous), and replies from any of them (spoofing).
	s.st.SetPromiscuousMode(nicID, true)
	s.st.SetSpoofing(nicID, true)
	s.st.SetRouteTable([]tcpip.Route{
		{Destination: header.IPv4EmptySubnet, NIC: nicID},
		{Destination: header.IPv6EmptySubnet, NIC: nicID},
	})
	fwd := tcp.NewForwarder(s.st, 0, maxConnecting, s.tcpRequest)
	s.st.SetTransportProtocolHandler(tcp.ProtocolNumber, fwd.HandlePacket)
	ufwd := udp.NewForwarder(s.st, s.udpRequest)
	s.st.SetTransportProtocolHandler(udp.ProtocolNumber, ufwd.HandlePacket)
	// Configured: the device's reader may start (see echoTap.Attach).
	tap.start()
	for _, p := range cfg.Publish {
		if err := s.publish(p); err != nil {
			s.Close()
			return &netpolicy.PublishError{Host: p.Host.String(), Err: err}
		}
	}
	return nil
}

// Drain waits, at most d, for the guards to have checked what the sandbox
// sent before it ended: once its processes are gone, each reads the end
// of its connection soon, after the bytes before it, and reports what it
// refuses.
func (s *Server) Drain(d time.Duration) {
	done := make(chan struct{})
	go func() {
		s.guards.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// Close stops the stack and drops every connection.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	closers := s.closers
	s.mu.Unlock()
	s.cancel()
	for _, c := range closers {
		c()
	}
	s.waking.Wait()
	if s.st == nil {
		s.wg.Wait()
		return nil
	}
	s.st.Close()
	// The device's reader must have stopped before the caller closes the
	// device: a descriptor number closed under it is soon another
	// connection's (a blocking socket, whose read would then hold a P of
	// the shared helper for good, and take that connection's messages).
	s.st.Wait()
	s.mu.Lock()
	for _, fd := range s.stopFDs {
		unix.Close(fd)
	}
	s.stopFDs = nil
	if s.reading {
		s.reading = false
		attached.Add(-1)
		stopped.Store(true)
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// onClose registers what Close ends; false when already closed.
func (s *Server) onClose(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.closers = append(s.closers, f)
	return true
}

// Limits.
const (
	maxConnecting  = 1024 // connections being set up at once
	maxDNSInFlight = 256  // DNS queries upstream at once; beyond, dropped (clients retry)
)

var errClosed = errors.New("closed")

// configureDelay is a pause a test puts between the stack's interface
// being made and its configuration: the window a loaded machine sometimes
// opened there.
var configureDelay atomic.Int64

func addrOf(a tcpip.Address) netip.Addr {
	if a.Len() == 4 {
		return netip.AddrFrom4(a.As4())
	}
	return netip.AddrFrom16(a.As16()).Unmap()
}

func fullAddr(ap netip.AddrPort) tcpip.FullAddress {
	return tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFromSlice(ap.Addr().Unmap().AsSlice()), Port: ap.Port()}
}

func proto(a netip.Addr) tcpip.NetworkProtocolNumber {
	if a.Unmap().Is4() {
		return ipv4.ProtocolNumber
	}
	return ipv6.ProtocolNumber
}
