// Package nettest holds what pinfold's end-to-end tests share: the
// pinfold binary built as it ships, and for the network tests, test hosts in
// network namespaces the test makes (joined to the host by veth pairs),
// echo servers, a DNS server for test names, and netclient (a program the
// tests run inside sandboxes). The tests talk only to these and to the
// host's loopback: nothing leaves the machine.
package nettest

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BuildPinfold builds the pinfold binary into dir as scripts/build.sh
// does (entered through the launch cache on amd64) and returns its path.
func BuildPinfold(dir string) (string, error) {
	out := filepath.Join(dir, "pinfold")
	args := []string{"build", "-o", out}
	if runtime.GOARCH == "amd64" {
		args = append(args, "-ldflags=-E pinfold_entry")
	}
	build := exec.Command("go", append(args, "github.com/pinfold/pinfold/cmd/pinfold")...)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building pinfold: %v\n%s", err, b)
	}
	// Its network helper goes beside it, where pinfold looks for it.
	if _, err := BuildHelper(dir); err != nil {
		return "", err
	}
	// So does the API server of pinfold serve.
	api := exec.Command("go", "build", "-o", filepath.Join(dir, "pinfold-api"), "github.com/pinfold/pinfold/cmd/pinfold-api")
	api.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := api.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building pinfold-api: %v\n%s", err, b)
	}
	return out, nil
}

// BuildHelper builds pinfold-net (the network helper) into dir, points
// PINFOLD_NET_HELPER at it for this process (library tests have no
// pinfold binary beside them) and returns its path.
func BuildHelper(dir string) (string, error) {
	out := filepath.Join(dir, "pinfold-net")
	build := exec.Command("go", "build", "-o", out, "github.com/pinfold/pinfold/cmd/pinfold-net")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building pinfold-net: %v\n%s", err, b)
	}
	os.Setenv("PINFOLD_NET_HELPER", out)
	return out, nil
}

// BuildClient builds netclient into dir and returns its path.
func BuildClient(dir string) (string, error) {
	out := filepath.Join(dir, "netclient")
	build := exec.Command("go", "build", "-o", out, "github.com/pinfold/pinfold/internal/nettest/netclient")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building netclient: %v\n%s", err, b)
	}
	return out, nil
}

var netSeq atomic.Int32

// hostSlots is how many test hosts the machine has at once, across test
// processes: slot n is the host's end of the veth pair, pfhN, and the
// subnets 10.231.N.0/24 and fd99:N::/64. The kernel's interface names
// allot the slots: a process takes the first one whose pfhN it can make.
// (Slots computed from the process id collided between processes, and
// two hosts' IPv4 subnets between slots 250 apart.)
const hostSlots = 250

// Host is a test host: a network namespace at Addr (IPv4) and Addr6,
// joined to the host by a veth pair and reachable from it.
type Host struct {
	NS          string
	Addr, Addr6 string
}

// NewHost makes a test host, removed when the test ends. It skips the
// test without root or ip(8).
func NewHost(t *testing.T) *Host {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making a test host needs root (network namespaces and veth pairs)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("making a test host needs ip(8) from iproute2")
	}
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	seq := int(netSeq.Add(1))
	h := &Host{NS: fmt.Sprintf("pftest%d-%d", os.Getpid(), seq)}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", h.NS).Run() })
	ip("netns", "add", h.NS)
	// Starting from a slot of its own, each process's hosts seldom
	// try a slot another has.
	n, host := 0, ""
	for i := range hostSlots {
		n = (os.Getpid()*7+seq+i)%hostSlots + 1
		host = fmt.Sprintf("pfh%d", n)
		out, err := exec.Command("ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", h.NS).CombinedOutput()
		if err == nil {
			break
		}
		if !strings.Contains(string(out), "File exists") || i == hostSlots-1 {
			t.Fatalf("ip link add %s: %v\n%s", host, err, out)
		}
	}
	h.Addr, h.Addr6 = fmt.Sprintf("10.231.%d.2", n), fmt.Sprintf("fd99:%x::2", n)
	for _, c := range [][]string{
		{"addr", "add", fmt.Sprintf("10.231.%d.1/24", n), "dev", host},
		{"addr", "add", fmt.Sprintf("fd99:%x::1/64", n), "dev", host, "nodad"},
		{"link", "set", host, "up"},
		{"-n", h.NS, "addr", "add", h.Addr + "/24", "dev", "eth0"},
		{"-n", h.NS, "addr", "add", h.Addr6 + "/64", "dev", "eth0", "nodad"},
		{"-n", h.NS, "link", "set", "eth0", "up"},
		{"-n", h.NS, "link", "set", "lo", "up"},
	} {
		ip(c...)
	}
	return h
}

// Inside runs f on a thread that has joined the test host's namespace;
// sockets f makes belong to it.
func (h *Host) Inside(t *testing.T, f func()) {
	t.Helper()
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		fd, err := unix.Open("/run/netns/"+h.NS, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = unix.Setns(fd, unix.CLONE_NEWNET)
			unix.Close(fd)
		}
		if err == nil {
			f()
		}
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatalf("joining %s: %v", h.NS, err)
	}
}

// EchoTCP serves "echo LINE" for each line on l.
func EchoTCP(t *testing.T, l net.Listener) {
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				line, err := r.ReadString('\n')
				if err != nil {
					return
				}
				if strings.HasPrefix(line, "GET ") {
					fmt.Fprint(c, "HTTP/1.0 200 OK\r\n\r\n")
					return
				}
				fmt.Fprintf(c, "echo %s\n", strings.TrimSpace(line))
			}()
		}
	}()
}

// EchoUDP answers each datagram with "echo " and the datagram.
func EchoUDP(t *testing.T, pc net.PacketConn) {
	t.Cleanup(func() { pc.Close() })
	go func() {
		b := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(b)
			if err != nil {
				return
			}
			pc.WriteTo(append([]byte("echo "), b[:n]...), from)
		}
	}()
}

// ServeDNS answers A and AAAA queries from records (name -> addresses) on
// pc; other names get NXDOMAIN.
func ServeDNS(t *testing.T, pc net.PacketConn, records map[string][]string) {
	t.Cleanup(func() { pc.Close() })
	go func() {
		b := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(b)
			if err != nil {
				return
			}
			if r := dnsAnswer(b[:n], records); r != nil {
				pc.WriteTo(r, from)
			}
		}
	}()
}

// dnsAnswer builds the test server's response to query q.
func dnsAnswer(q []byte, records map[string][]string) []byte {
	if len(q) < 12 {
		return nil
	}
	var labels []string
	i := 12
	for i < len(q) && q[i] != 0 {
		l := int(q[i])
		if i+1+l > len(q) {
			return nil
		}
		labels = append(labels, string(q[i+1:i+1+l]))
		i += 1 + l
	}
	if i+5 > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[i+1:])
	end := i + 5
	name := strings.ToLower(strings.Join(labels, "."))
	r := append([]byte(nil), q[:end]...)
	r[2] |= 0x80 // response
	r[3] = 0x80  // recursion available
	r[10], r[11] = 0, 0
	addrs, ok := records[name]
	if !ok {
		r[3] |= 3
		return r
	}
	count := 0
	for _, a := range addrs {
		ip := net.ParseIP(a)
		var data []byte
		switch {
		case ip.To4() != nil && qtype == 1:
			data = ip.To4()
		case ip.To4() == nil && qtype == 28:
			data = ip.To16()
		default:
			continue
		}
		r = append(r, 0xc0, 12)
		r = binary.BigEndian.AppendUint16(r, qtype)
		r = append(r, 0, 1, 0, 0, 0, 60)
		r = binary.BigEndian.AppendUint16(r, uint16(len(data)))
		r = append(r, data...)
		count++
	}
	binary.BigEndian.PutUint16(r[6:], uint16(count))
	return r
}

// Env is a test host with echo servers on TCP port 7000 and UDP port
// 7001 (IPv4 and IPv6), a DNS server of its own on port 53, and a resolver
// on the host's loopback that knows the test names: allowed.test,
// api.svc.test, deep.a.svc.test, deny.svc.test and other.test (the test
// host), meta.test (169.254.169.254) and v6.test (its IPv6 address).
type Env struct {
	Host *Host
	DNS  string // the resolver pinfold uses (--dns)
}

// NewEnv makes an Env, torn down when the test ends.
func NewEnv(t *testing.T) *Env { return NewEnvWith(t, nil) }

// TestHostAddr, as an address in NewEnvWith's extra, stands for the test
// host's IPv4 address (known only once the host is made).
const TestHostAddr = "test-host"

// NewEnvWith is NewEnv whose DNS servers also answer the names of extra.
func NewEnvWith(t *testing.T, extra map[string][]string) *Env {
	h := NewHost(t)
	records := map[string][]string{
		"allowed.test":    {h.Addr, h.Addr6},
		"api.svc.test":    {h.Addr},
		"deep.a.svc.test": {h.Addr},
		"deny.svc.test":   {h.Addr},
		"other.test":      {h.Addr},
		"meta.test":       {"169.254.169.254"},
		"v6.test":         {h.Addr6},
	}
	for n, a := range extra {
		a = append([]string(nil), a...)
		for i := range a {
			if a[i] == TestHostAddr {
				a[i] = h.Addr
			}
		}
		records[n] = a
	}
	h.Inside(t, func() {
		for _, a := range []string{h.Addr, "[" + h.Addr6 + "]"} {
			l, err := net.Listen("tcp", a+":7000")
			if err != nil {
				t.Error(err)
				return
			}
			EchoTCP(t, l)
			pc, err := net.ListenPacket("udp", a+":7001")
			if err != nil {
				t.Error(err)
				return
			}
			EchoUDP(t, pc)
		}
		pc, err := net.ListenPacket("udp", h.Addr+":53")
		if err != nil {
			t.Error(err)
			return
		}
		ServeDNS(t, pc, records)
	})
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ServeDNS(t, pc, records)
	return &Env{Host: h, DNS: pc.LocalAddr().String()}
}

// Answer is what netclient prints.
type Answer struct {
	Out string `json:"out"`
	Err string `json:"err"`
}

// AskPublished sends "hello" to a port a sandbox publishes on the host's
// loopback, retrying until the server inside listens or wait is over,
// and returns its first line of answer ("" when none came).
func AskPublished(port int, wait time.Duration) string {
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err != nil {
			continue
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprint(c, "hello\n")
		got, _ := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if got != "" {
			return got
		}
	}
	return ""
}
