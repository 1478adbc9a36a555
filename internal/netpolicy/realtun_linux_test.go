package netpolicy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// These tests run the stack against a real kernel: a network namespace
// whose eth0 is a TUN device the stack serves, as a sandbox's is.

var realSeq atomic.Int32

type realSandbox struct {
	ns string
	s  *Stack
}

func newRealSandbox(t *testing.T, cfg Config) *realSandbox {
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
		ifr, _ := unix.NewIfreq(Device)
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return err
		}
		tun = os.NewFile(uintptr(fd), "tun")
		return nil
	})
	for _, c := range [][]string{
		{"link", "set", Device, "mtu", fmt.Sprint(MTU), "up"},
		{"addr", "add", fmt.Sprintf("%s/%d", SandboxAddr, Prefix4), "dev", Device},
		{"link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", append([]string{"-n", rs.ns}, c...)...).CombinedOutput(); err != nil {
			tun.Close()
			t.Fatalf("ip %s: %v: %s", strings.Join(c, " "), err, out)
		}
	}
	s, err := Start(context.Background(), cfg, tun)
	if err != nil {
		t.Fatal(err)
	}
	rs.s = s
	t.Cleanup(func() { s.Close() })
	return rs
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
	rs := newRealSandbox(t, Config{Mode: Outbound, HostLoopback: true})
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
		c, err = d.Dial("tcp", netip.AddrPortFrom(HostAddr, uint16(l.Addr().(*net.TCPAddr).Port)).String())
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
	rs := newRealSandbox(t, Config{Mode: Outbound, HostLoopback: true})
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
		c, err = net.DialTimeout("tcp", netip.AddrPortFrom(HostAddr, uint16(l.Addr().(*net.TCPAddr).Port)).String(), 3*time.Second)
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
