package native_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/native"
)

// The network tests talk only to servers on the host's loopback and to a
// test host: a network namespace the test makes, joined to the host by a
// veth pair. Nothing leaves the machine.

var netSeq atomic.Int32

// testHost is a network namespace at addr (IPv4) and addr6, reachable
// from the host.
type testHost struct {
	ns          string
	addr, addr6 string
}

func newTestHost(t *testing.T) *testHost {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making a test host needs root (network namespaces and veth pairs)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("making a test host needs ip(8) from iproute2")
	}
	n := int(netSeq.Add(1)) + (os.Getpid()%50)*4
	h := &testHost{
		ns:    fmt.Sprintf("pftest%d-%d", os.Getpid(), n),
		addr:  fmt.Sprintf("10.231.%d.2", n%250),
		addr6: fmt.Sprintf("fd99:%x::2", n),
	}
	host := fmt.Sprintf("pfh%d", n)
	cmds := [][]string{
		{"netns", "add", h.ns},
		{"link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", h.ns},
		{"addr", "add", fmt.Sprintf("10.231.%d.1/24", n%250), "dev", host},
		{"addr", "add", fmt.Sprintf("fd99:%x::1/64", n), "dev", host, "nodad"},
		{"link", "set", host, "up"},
		{"-n", h.ns, "addr", "add", h.addr + "/24", "dev", "eth0"},
		{"-n", h.ns, "addr", "add", h.addr6 + "/64", "dev", "eth0", "nodad"},
		{"-n", h.ns, "link", "set", "eth0", "up"},
		{"-n", h.ns, "link", "set", "lo", "up"},
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", h.ns).Run() })
	for _, c := range cmds {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(c, " "), err, out)
		}
	}
	return h
}

// inside runs f on a thread that has joined the test host's namespace;
// sockets f makes belong to it.
func (h *testHost) inside(t *testing.T, f func()) {
	t.Helper()
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		fd, err := unix.Open("/run/netns/"+h.ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
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
		t.Fatalf("joining %s: %v", h.ns, err)
	}
}

// echoTCP serves "echo LINE" for each line on l.
func echoTCP(t *testing.T, l net.Listener) {
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

// echoUDP answers each datagram with "echo " and the datagram.
func echoUDP(t *testing.T, pc net.PacketConn) {
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

// serveDNS answers A and AAAA queries from records (name -> addresses) on
// pc; other names get NXDOMAIN.
func serveDNS(t *testing.T, pc net.PacketConn, records map[string][]string) {
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

// netEnv is a test host with echo servers on TCP port 7000 and UDP port
// 7001, a DNS server of its own on port 53, and a resolver on the host's
// loopback that knows the test names.
type netEnv struct {
	host *testHost
	dns  string // the resolver pinfold uses (--dns)
}

func newNetEnv(t *testing.T) *netEnv {
	h := newTestHost(t)
	records := map[string][]string{
		"allowed.test":    {h.addr, h.addr6},
		"api.svc.test":    {h.addr},
		"deep.a.svc.test": {h.addr},
		"deny.svc.test":   {h.addr},
		"other.test":      {h.addr},
		"meta.test":       {"169.254.169.254"},
		"v6.test":         {h.addr6},
	}
	h.inside(t, func() {
		for _, a := range []string{h.addr, "[" + h.addr6 + "]"} {
			l, err := net.Listen("tcp", a+":7000")
			if err != nil {
				t.Error(err)
				return
			}
			echoTCP(t, l)
			pc, err := net.ListenPacket("udp", a+":7001")
			if err != nil {
				t.Error(err)
				return
			}
			echoUDP(t, pc)
		}
		pc, err := net.ListenPacket("udp", h.addr+":53")
		if err != nil {
			t.Error(err)
			return
		}
		serveDNS(t, pc, records)
	})
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveDNS(t, pc, records)
	return &netEnv{host: h, dns: pc.LocalAddr().String()}
}

type netResult struct {
	Out string `json:"out"`
	Err string `json:"err"`
}

// netRun runs netclient with args in a sandbox of spec and returns its
// answer and the run's result.
func netRun(t *testing.T, spec sandbox.Spec, args ...string) (netResult, *sandbox.Result) {
	t.Helper()
	spec.Mounts = append(spec.Mounts, sandbox.Mount{Source: attackerDir, Target: "/pinfold-test", ReadOnly: true})
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := native.Run(ctx, spec, &sandbox.Cmd{Args: append([]string{"/pinfold-test/netclient"}, args...), Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("netclient %v: %v", args, err)
	}
	var r netResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("netclient %v: %v: %q %q", args, err, out.String(), errb.String())
	}
	return r, res
}

func allowSpec(e *netEnv, allow ...string) sandbox.Spec {
	return sandbox.Spec{Network: sandbox.NetworkAllow, Net: sandbox.NetPolicy{Allow: allow, DNS: []string{e.dns}}}
}

// wantOK and wantBlocked check a netclient answer.
func wantOK(t *testing.T, r netResult, out string, what string) {
	t.Helper()
	if r.Err != "" || !strings.Contains(r.Out, out) {
		t.Errorf("%s: got out %q err %q, want %q", what, r.Out, r.Err, out)
	}
}

func wantBlocked(t *testing.T, r netResult, res *sandbox.Result, kind, what string) {
	t.Helper()
	if r.Err == "" {
		t.Errorf("%s: went through (out %q), want it blocked", what, r.Out)
	}
	for _, v := range res.Violations {
		if v.Kind == kind {
			return
		}
	}
	t.Errorf("%s: no %s violation recorded (have %+v)", what, kind, res.Violations)
}

func TestNetworkAllowedNameWorks(t *testing.T) {
	e := newNetEnv(t)
	spec := allowSpec(e, "allowed.test")
	r, res := netRun(t, spec, "tcp", "allowed.test:7000")
	wantOK(t, r, "echo ping", "tcp to an allowed name")
	if len(res.Violations) != 0 {
		t.Errorf("violations for an allowed connection: %+v", res.Violations)
	}
	r, _ = netRun(t, spec, "udp", "allowed.test:7001")
	wantOK(t, r, "echo ping", "udp to an allowed name")
	r, _ = netRun(t, spec, "resolve", "allowed.test")
	wantOK(t, r, e.host.addr, "resolving an allowed name")
}

func TestNetworkDeniedNameFails(t *testing.T) {
	e := newNetEnv(t)
	r, res := netRun(t, allowSpec(e, "allowed.test"), "tcp", "other.test:7000")
	wantBlocked(t, r, res, "dns", "a name not in the allow list")
	if v := res.Violations[0]; v.Name != "other.test" || v.Reason == "" {
		t.Errorf("violation %+v, want name other.test with a reason", v)
	}
}

func TestNetworkRawIPBlocked(t *testing.T) {
	e := newNetEnv(t)
	spec := allowSpec(e, "allowed.test")
	r, res := netRun(t, spec, "tcp", e.host.addr+":7000")
	wantBlocked(t, r, res, "tcp", "tcp to a raw address")
	r, res = netRun(t, spec, "udp", e.host.addr+":7001")
	wantBlocked(t, r, res, "udp", "udp to a raw address")
	r, res = netRun(t, spec, "tcp", "["+e.host.addr6+"]:7000")
	wantBlocked(t, r, res, "tcp", "tcp to a raw IPv6 address")
	// The same address is fine once listed as a CIDR.
	r, _ = netRun(t, allowSpec(e, e.host.addr+"/32"), "tcp", e.host.addr+":7000")
	wantOK(t, r, "echo ping", "tcp to an allowed CIDR")
}

func TestNetworkWildcardAndDenyWins(t *testing.T) {
	e := newNetEnv(t)
	spec := allowSpec(e, "*.svc.test")
	spec.Net.Deny = []string{"deny.svc.test"}
	r, _ := netRun(t, spec, "tcp", "api.svc.test:7000")
	wantOK(t, r, "echo ping", "a name under the wildcard")
	r, _ = netRun(t, spec, "tcp", "deep.a.svc.test:7000")
	wantOK(t, r, "echo ping", "a deeper name under the wildcard")
	r, res := netRun(t, spec, "tcp", "deny.svc.test:7000")
	wantBlocked(t, r, res, "dns", "a denied name under an allowed wildcard")
	if v := res.Violations[0]; v.Rule != "deny.svc.test" {
		t.Errorf("violation %+v, want the rule deny.svc.test", v)
	}
	r, res = netRun(t, spec, "tcp", "allowed.test:7000")
	wantBlocked(t, r, res, "dns", "a name outside the wildcard")
}

func TestNetworkOtherDNSServersBlocked(t *testing.T) {
	e := newNetEnv(t)
	// Even a listed name's address is no DNS server for the sandbox.
	r, res := netRun(t, allowSpec(e, "allowed.test"), "dns", e.host.addr+":53", "allowed.test")
	wantBlocked(t, r, res, "udp", "DNS to the test host's server")
	r, _ = netRun(t, allowSpec(e, "allowed.test"), "dns", "10.0.2.3:53", "allowed.test")
	wantOK(t, r, "rcode 0 answers 1", "DNS to pinfold's server")
}

func TestNetworkHTTPHostChecked(t *testing.T) {
	e := newNetEnv(t)
	spec := allowSpec(e, "allowed.test")
	r, _ := netRun(t, spec, "http", "allowed.test:7000", "allowed.test")
	wantOK(t, r, "200 OK", "HTTP with an allowed Host")
	r, res := netRun(t, spec, "http", "allowed.test:7000", "other.test")
	wantBlocked(t, r, res, "tcp", "HTTP to an allowed address with another Host")
}

func TestNetworkLoopbackAndHostLoopback(t *testing.T) {
	e := newNetEnv(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	echoTCP(t, l)
	port := fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
	// An allowed name that resolves to a link-local address does not
	// open it (127.0.0.1 inside is the sandbox's own loopback).
	spec := allowSpec(e, "meta.test")
	r, res := netRun(t, spec, "tcp", "meta.test:80")
	wantBlocked(t, r, res, "tcp", "an allowed name resolving to the metadata address")
	r, res = netRun(t, spec, "tcp", "10.0.2.2:"+port)
	wantBlocked(t, r, res, "tcp", "the host address without --host-loopback")
	spec.Net.HostLoopback = true
	r, _ = netRun(t, spec, "tcp", "10.0.2.2:"+port)
	wantOK(t, r, "echo ping", "the host's loopback with --host-loopback")
}

func TestNetworkOutbound(t *testing.T) {
	e := newNetEnv(t)
	spec := sandbox.Spec{Network: sandbox.NetworkOutbound, Net: sandbox.NetPolicy{DNS: []string{e.dns}, Deny: []string{"deny.svc.test"}}}
	r, _ := netRun(t, spec, "tcp", e.host.addr+":7000")
	wantOK(t, r, "echo ping", "outbound to a raw address")
	r, _ = netRun(t, spec, "tcp", "other.test:7000")
	wantOK(t, r, "echo ping", "outbound to any name")
	r, res := netRun(t, spec, "tcp", "deny.svc.test:7000")
	wantBlocked(t, r, res, "dns", "outbound to a denied name")
}

func TestNetworkPublish(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	spec := sandbox.Spec{Net: sandbox.NetPolicy{Publish: []string{fmt.Sprintf("%d:8000", port)}}}
	spec.Mounts = []sandbox.Mount{{Source: attackerDir, Target: "/pinfold-test", ReadOnly: true}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb, err := native.New(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	var out bytes.Buffer
	p, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"/pinfold-test/netclient", "serve", "8000"}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	var got string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err != nil {
			continue
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprint(c, "hello\n")
		got, _ = bufio.NewReader(c).ReadString('\n')
		c.Close()
		if got != "" {
			break
		}
	}
	res, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(got) != "echo hello" || res.ExitCode != 0 {
		t.Errorf("published port: got %q, exit %d, output %q", got, res.ExitCode, out.String())
	}
}

func TestNetworkPolicyLog(t *testing.T) {
	e := newNetEnv(t)
	var log bytes.Buffer
	spec := allowSpec(e, "allowed.test")
	spec.Net.Log = &log
	netRun(t, spec, "tcp", "other.test:7000")
	var v sandbox.Violation
	if err := json.Unmarshal(bytes.SplitN(log.Bytes(), []byte("\n"), 2)[0], &v); err != nil {
		t.Fatalf("log %q: %v", log.String(), err)
	}
	if v.Kind != "dns" || v.Name != "other.test" || v.Time.IsZero() {
		t.Errorf("logged %+v", v)
	}
}

func TestNetworkIPv6(t *testing.T) {
	e := newNetEnv(t)
	spec := allowSpec(e, "v6.test")
	r, res := netRun(t, spec, "tcp", "v6.test:7000")
	wantOK(t, r, "echo ping", "tcp over IPv6 to an allowed name")
	if len(res.Violations) != 0 {
		t.Errorf("violations: %+v", res.Violations)
	}
	r, _ = netRun(t, spec, "udp", "v6.test:7001")
	wantOK(t, r, "echo ping", "udp over IPv6 to an allowed name")
	r, res = netRun(t, allowSpec(e, "allowed.test"), "udp", "["+e.host.addr6+"]:7001")
	wantBlocked(t, r, res, "udp", "udp to a raw IPv6 address")
}
