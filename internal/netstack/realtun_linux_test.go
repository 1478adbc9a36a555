package netstack

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/internal/netpolicy"
)

// These tests run the stack against a real kernel: a network namespace
// whose eth0 is a TUN device the stack serves, as a sandbox's is. The TCP
// behaviour they check (answering keepalive and zero-window probes) is
// gVisor's now; they stay as the sandbox sees it.

var realSeq atomic.Int32

type realSandbox struct {
	ns string
	s  *Server
}

func newRealSandbox(t *testing.T, cfg netpolicy.Config) *realSandbox {
	t.Helper()
	return newRealSandboxAttached(t, cfg, false)
}

// newRealSandboxAttached is newRealSandbox whose stack is built at the
// first packet when lazy (AttachOnTraffic), as the helper does.
func newRealSandboxAttached(t *testing.T, cfg netpolicy.Config, lazy bool) *realSandbox {
	t.Helper()
	rs, tun := newRealDevice(t)
	fd, err := unix.Dup(int(tun.Fd()))
	tun.Close()
	if err != nil {
		t.Fatal(err)
	}
	var s *Server
	if lazy {
		s = New(netpolicy.NewPolicy(cfg))
		if err = s.AttachOnTraffic(fd); err != nil {
			s.Close()
		}
		t.Cleanup(func() { unix.Close(fd) }) // after s.Close, below
	} else {
		s, err = Serve(netpolicy.NewPolicy(cfg), fd)
	}
	if err != nil {
		t.Fatal(err)
	}
	rs.s = s
	t.Cleanup(func() { s.Close() })
	return rs
}

// newRealDevice makes a network namespace whose eth0 is a TUN device, as
// a sandbox's, and returns the device for a stack to serve.
func newRealDevice(t *testing.T) (*realSandbox, *os.File) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a network namespace with a TUN device needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8)")
	}
	rs := &realSandbox{ns: fmt.Sprintf("pfnp%d-%d", os.Getpid(), realSeq.Add(1))}
	if out, err := exec.Command("ip", "netns", "add", rs.ns).CombinedOutput(); err != nil {
		t.Skipf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", rs.ns).Run() })
	var tun *os.File
	rs.inside(t, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		ifr, _ := unix.NewIfreq(netpolicy.Device)
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return err
		}
		tun = os.NewFile(uintptr(fd), "tun")
		return nil
	})
	// As the sandbox's init does: no router solicitation at link up.
	if out, err := exec.Command("ip", "netns", "exec", rs.ns, "sysctl", "-qw", "net.ipv6.conf."+netpolicy.Device+".accept_ra=0").CombinedOutput(); err != nil {
		tun.Close()
		t.Fatalf("sysctl: %v: %s", err, out)
	}
	for _, c := range [][]string{
		{"link", "set", netpolicy.Device, "mtu", fmt.Sprint(netpolicy.MTU), "up"},
		{"addr", "add", fmt.Sprintf("%s/%d", netpolicy.SandboxAddr, netpolicy.Prefix4), "dev", netpolicy.Device},
		{"route", "add", "default", "dev", netpolicy.Device},
		{"link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", append([]string{"-n", rs.ns}, c...)...).CombinedOutput(); err != nil {
			tun.Close()
			t.Fatalf("ip %s: %v: %s", strings.Join(c, " "), err, out)
		}
	}
	return rs, tun
}

// inside runs f on a thread in the namespace; sockets it makes stay there.
func (rs *realSandbox) inside(t *testing.T, f func() error) {
	t.Helper()
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		fd, err := unix.Open("/run/netns/"+rs.ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = unix.Setns(fd, unix.CLONE_NEWNET)
			unix.Close(fd)
		}
		if err == nil {
			err = f()
		}
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// The stack did not answer keepalive probes, so the sandbox's kernel
// timed out every idle connection whose program enables keepalive (Go
// does by default: 15s idle, 9 probes 15s apart).
func TestRealKernelKeepaliveKeepsIdleConnection(t *testing.T) {
	rs := newRealSandbox(t, netpolicy.Config{Mode: netpolicy.Outbound, HostLoopback: true})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					fmt.Fprintf(c, "echo %s", line)
				}
			}()
		}
	}()
	var c net.Conn
	rs.inside(t, func() (err error) {
		d := net.Dialer{Timeout: 3 * time.Second, KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: time.Second, Interval: 500 * time.Millisecond, Count: 2}}
		c, err = d.Dial("tcp", netip.AddrPortFrom(netpolicy.HostAddr, uint16(l.Addr().(*net.TCPAddr).Port)).String())
		return err
	})
	defer c.Close()
	r := bufio.NewReader(c)
	for i, idle := range []time.Duration{0, 4 * time.Second} {
		time.Sleep(idle)
		c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := fmt.Fprintf(c, "line %d\n", i); err != nil {
			t.Fatalf("after %v idle: %v", idle, err)
		}
		if got, err := r.ReadString('\n'); err != nil || got != fmt.Sprintf("echo line %d\n", i) {
			t.Fatalf("after %v idle: %q, %v", idle, got, err)
		}
	}
}

// The sandbox's zero-window probes went unanswered too, so when the host
// side stopped reading for long enough (about tcp_retries2 probes; 3 here
// to keep the test short) the sandbox's kernel aborted the connection and
// the data it still held was lost.
func TestRealKernelSlowHostSideKeepsConnection(t *testing.T) {
	rs := newRealSandbox(t, netpolicy.Config{Mode: netpolicy.Outbound, HostLoopback: true})
	if out, err := exec.Command("ip", "netns", "exec", rs.ns, "sysctl", "-qw", "net.ipv4.tcp_retries2=3").CombinedOutput(); err != nil {
		t.Skipf("sysctl: %v: %s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	data := make([]byte, 32<<20)
	for i := range data {
		data[i] = byte(i * 7 / 5)
	}
	got := make(chan []byte, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		time.Sleep(6 * time.Second) // the host side is slow
		b, _ := io.ReadAll(c)
		got <- b
	}()
	var c net.Conn
	rs.inside(t, func() (err error) {
		c, err = net.DialTimeout("tcp", netip.AddrPortFrom(netpolicy.HostAddr, uint16(l.Addr().(*net.TCPAddr).Port)).String(), 3*time.Second)
		return err
	})
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(data); err != nil {
		t.Fatalf("writing to a slow host side: %v", err)
	}
	c.(*net.TCPConn).CloseWrite()
	if b := <-got; !bytes.Equal(b, data) {
		t.Errorf("the host side got %d bytes, want the %d sent", len(b), len(data))
	}
}

// Close waited for pending host-side connects (up to dialTimeout, 15s) and
// upstream DNS queries (3s per resolver), and the sandbox's result waits
// for Close.
func TestCloseDoesNotWaitForDialsOrUpstreams(t *testing.T) {
	// A listener whose accept queue is full drops SYNs: connects to it
	// hang.
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	unix.Listen(fd, 0)
	sa, _ := unix.Getsockname(fd)
	port := sa.(*unix.SockaddrInet4).Port
	filler, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	defer filler.Close()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0") // never answers
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	rs := newRealSandbox(t, netpolicy.Config{Mode: netpolicy.Outbound, HostLoopback: true,
		DNS: []netip.AddrPort{netip.MustParseAddrPort(pc.LocalAddr().String())}})
	rs.inside(t, func() error {
		go net.DialTimeout("tcp", netip.AddrPortFrom(netpolicy.HostAddr, uint16(port)).String(), 20*time.Second)
		c, err := net.Dial("udp", netpolicy.DNSAddr.String()+":53")
		if err != nil {
			return err
		}
		c.Write(query("example.org"))
		return nil
	})
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	rs.s.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d.Round(100*time.Millisecond))
	}
}

// query is a DNS query for name's A record.
func query(name string) []byte {
	q := []byte{0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}
	for _, l := range bytes.Split([]byte(name), []byte(".")) {
		q = append(append(q, byte(len(l))), l...)
	}
	return append(q, 0, 0, 1, 0, 1)
}

// Every UDP query to pinfold's DNS server got a goroutine and a host
// socket for as long as the upstream took, without bound: a sandbox could
// exhaust the helper's descriptors.
func TestDNSQueriesInFlightAreBounded(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0") // never answers
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	rs := newRealSandbox(t, netpolicy.Config{Mode: netpolicy.Outbound,
		DNS: []netip.AddrPort{netip.MustParseAddrPort(pc.LocalAddr().String())}})
	before := runtime.NumGoroutine()
	const n = 3000
	rs.inside(t, func() error {
		c, err := net.Dial("udp", netpolicy.DNSAddr.String()+":53")
		if err != nil {
			return err
		}
		defer c.Close()
		for i := range n {
			c.Write(query(fmt.Sprintf("n%d.example.org", i)))
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond)
	if g := runtime.NumGoroutine() - before; g > 2*maxDNSInFlight {
		t.Errorf("%d goroutines for %d unanswered queries", g, n)
	}
}

// attached reports whether the stack was built.
func (s *Server) attached() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st != nil
}

// A sandbox that sends nothing gets no stack; its first packet builds one,
// and that packet (a connection's SYN, waiting in the device) is served.
func TestAttachOnTraffic(t *testing.T) {
	rs := newRealSandboxAttached(t, netpolicy.Config{Mode: netpolicy.Outbound, HostLoopback: true}, true)
	time.Sleep(300 * time.Millisecond)
	if rs.s.attached() {
		t.Fatal("a stack was built for a sandbox that sent nothing")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Write([]byte("hello\n"))
			c.Close()
		}
	}()
	var got []byte
	rs.inside(t, func() error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(netpolicy.HostAddr, uint16(l.Addr().(*net.TCPAddr).Port)).String(), 3*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		got, err = io.ReadAll(c)
		return err
	})
	if string(got) != "hello\n" || !rs.s.attached() {
		t.Fatalf("read %q, stack built %v", got, rs.s.attached())
	}
}

// Every packet the sandbox sent before its stack was built is served: the
// device's reader started as the stack's interface was created, before
// the stack answered for every address and had its forwarders, and what
// it read meanwhile was dropped or answered "port unreachable" (a raw DNS
// query, sent once, then failed: TestNetworkOtherDNSServersBlocked under
// go test ./...). configureDelay holds the window open that a loaded
// machine sometimes did. Queries for a .localhost name are answered by the stack
// itself.
func TestAttachOnTrafficServesFirstPackets(t *testing.T) {
	configureDelay.Store(int64(50 * time.Millisecond))
	t.Cleanup(func() { configureDelay.Store(0) })
	for round := range 3 {
		rs := newRealSandboxAttached(t, netpolicy.Config{Mode: netpolicy.Outbound}, true)
		const n = 16
		var failed []string
		rs.inside(t, func() error {
			var cs []net.Conn
			defer func() {
				for _, c := range cs {
					c.Close()
				}
			}()
			for range n {
				c, err := net.Dial("udp", netpolicy.DNSAddr.String()+":53")
				if err != nil {
					return err
				}
				cs = append(cs, c)
				c.Write(query("first.localhost"))
			}
			b := make([]byte, 512)
			deadline := time.Now().Add(5 * time.Second)
			for i, c := range cs {
				c.SetReadDeadline(deadline)
				if _, err := c.Read(b); err != nil {
					failed = append(failed, fmt.Sprintf("query %d: %v", i, err))
				}
			}
			return nil
		})
		if len(failed) > 0 {
			t.Fatalf("round %d: %d of %d queries sent before the stack was built went unanswered: %v", round, len(failed), n, failed)
		}
	}
}

// Close before any packet ends the wait for one, and builds nothing.
func TestAttachOnTrafficClosedFirst(t *testing.T) {
	rs := newRealSandboxAttached(t, netpolicy.Config{Mode: netpolicy.Outbound}, true)
	rs.s.Close()
	if rs.s.attached() {
		t.Fatal("a stack was built")
	}
	// The device is still the caller's, and usable: the sandbox's packet
	// now waits in it with nobody to build a stack.
	rs.inside(t, func() error {
		c, err := net.ListenPacket("udp4", ":0")
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.WriteTo([]byte("x"), &net.UDPAddr{IP: net.IPv4(10, 0, 2, 2), Port: 9})
		return err
	})
	time.Sleep(100 * time.Millisecond)
	if rs.s.attached() {
		t.Fatal("a stack was built after Close")
	}
}
