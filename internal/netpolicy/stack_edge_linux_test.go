package netpolicy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// These tests play the sandbox's kernel themselves: the stack's TUN device
// is one end of a SOCK_SEQPACKET pair (which keeps packet boundaries) and
// the test reads and writes raw IP packets on the other, so each segment
// the stack sends and each one it is sent is under the test's control.

type fakeSandbox struct {
	t *testing.T
	s *Stack
	f *os.File
}

func newFakeSandbox(t *testing.T, cfg Config) *fakeSandbox {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 8<<20)
	}
	s, err := Start(context.Background(), cfg, os.NewFile(uintptr(fds[0]), "tun"))
	if err != nil {
		t.Fatal(err)
	}
	fs := &fakeSandbox{t: t, s: s, f: os.NewFile(uintptr(fds[1]), "sandbox")}
	t.Cleanup(func() {
		s.Close()
		fs.f.Close()
	})
	return fs
}

// hostLoopback is a stack whose HostAddr reaches the test's 127.0.0.1.
func hostLoopback(t *testing.T) *fakeSandbox {
	return newFakeSandbox(t, Config{Mode: Outbound, HostLoopback: true})
}

// sendTCP writes a segment from src to dst.
func (fs *fakeSandbox) sendTCP(src, dst netip.AddrPort, seq, ack uint32, flags uint8, win uint16, opts, data []byte) {
	fs.t.Helper()
	if _, err := fs.f.Write(tcpPacket(nil, flowKey{in: dst, out: src}, seq, ack, flags, win, opts, data)); err != nil {
		fs.t.Fatal(err)
	}
}

// next returns the next packet the stack sends, or ok false after d.
func (fs *fakeSandbox) next(d time.Duration) (p packet, ok bool) {
	buf := make([]byte, MTU+64)
	fs.f.SetReadDeadline(time.Now().Add(d))
	n, err := fs.f.Read(buf)
	if err != nil {
		return p, false
	}
	return parseIP(buf[:n])
}

// nextTCP returns the next TCP segment the stack sends.
func (fs *fakeSandbox) nextTCP(d time.Duration) (tcpSeg, bool) {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		p, ok := fs.next(time.Until(deadline))
		if !ok {
			break
		}
		if p.proto != protoTCP {
			continue
		}
		seg, ok := parseTCP(p.l4)
		seg.payload = bytes.Clone(seg.payload)
		return seg, ok
	}
	return tcpSeg{}, false
}

// sandboxConn is one connection the fake sandbox opened.
type sandboxConn struct {
	fs       *fakeSandbox
	src, dst netip.AddrPort
	sndNxt   uint32 // the sandbox's next sequence number
	rcvNxt   uint32 // what the sandbox acknowledges
	c        *tcpConn
}

// connect opens a connection to dst from sandbox port sport with initial
// sequence number iss; opts go into the SYN and win is the window the
// sandbox advertises throughout (its SYN has no window scale unless opts
// has one).
func (fs *fakeSandbox) connect(dst netip.AddrPort, sport uint16, iss uint32, win uint16, opts []byte) *sandboxConn {
	fs.t.Helper()
	sc := &sandboxConn{fs: fs, src: netip.AddrPortFrom(SandboxAddr, sport), dst: dst, sndNxt: iss + 1}
	fs.sendTCP(sc.src, dst, iss, 0, flagSYN, win, opts, nil)
	seg, ok := fs.nextTCP(3 * time.Second)
	if !ok || seg.flags != flagSYN|flagACK || seg.ack != iss+1 {
		fs.t.Fatalf("no SYN-ACK: %+v %v", seg, ok)
	}
	sc.rcvNxt = seg.seq + 1
	fs.sendTCP(sc.src, dst, sc.sndNxt, sc.rcvNxt, flagACK, win, nil, nil)
	fs.s.mu.Lock()
	sc.c = fs.s.tcp[flowKey{sc.src, dst}]
	fs.s.mu.Unlock()
	if sc.c == nil {
		fs.t.Fatal("the connection is not in the table")
	}
	return sc
}

func (sc *sandboxConn) send(flags uint8, win uint16, data []byte) {
	sc.fs.sendTCP(sc.src, sc.dst, sc.sndNxt, sc.rcvNxt, flags, win, nil, data)
	sc.sndNxt += uint32(len(data))
	if flags&(flagSYN|flagFIN) != 0 {
		sc.sndNxt++
	}
}

// listen serves on the host's loopback; conns receives what it accepts.
func listen(t *testing.T) (netip.AddrPort, chan net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	conns := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			conns <- c
		}
	}()
	return netip.AddrPortFrom(HostAddr, uint16(l.Addr().(*net.TCPAddr).Port)), conns
}

func accepted(t *testing.T, conns chan net.Conn) net.Conn {
	t.Helper()
	select {
	case c := <-conns:
		return c
	case <-time.After(3 * time.Second):
		t.Fatal("the host side accepted nothing")
		return nil
	}
}

// A partial acknowledgment stopped the retransmission timer even though
// data was still in flight: when the rest was lost, nothing ever resent
// it and the connection hung.
func TestTCPRetransmitsAfterPartialAck(t *testing.T) {
	fs := hostLoopback(t)
	dst, conns := listen(t)
	mss := []byte{2, 4, 0x03, 0xe8} // 1000
	sc := fs.connect(dst, 30000, 1000, 0xffff, mss)
	up := accepted(t, conns)
	up.Write(bytes.Repeat([]byte("x"), 3000))
	var segs []tcpSeg
	for len(segs) < 3 {
		seg, ok := fs.nextTCP(3 * time.Second)
		if !ok {
			t.Fatalf("got %d segments, want 3", len(segs))
		}
		segs = append(segs, seg)
	}
	// The sandbox got only the first; the other two were lost.
	sc.rcvNxt = segs[0].seq + uint32(len(segs[0].payload))
	sc.send(flagACK, 0xffff, nil)
	seg, ok := fs.nextTCP(3 * time.Second)
	if !ok {
		t.Fatal("the lost segments were never retransmitted")
	}
	if seg.seq != sc.rcvNxt || len(seg.payload) == 0 {
		t.Errorf("retransmission %+v, want data from %d", seg, sc.rcvNxt)
	}
}

// The retransmission counter grew with every zero-window probe, answered
// or not, so a sandbox that stopped reading for about 73 seconds (a pipe
// into a pager, say) had its connection reset though it answered every
// probe.
func TestTCPZeroWindowProbesDoNotGiveUp(t *testing.T) {
	fs := hostLoopback(t)
	dst, conns := listen(t)
	sc := fs.connect(dst, 30001, 5000, 0, nil) // the window is closed from the start
	up := accepted(t, conns)
	up.Write([]byte("hello"))
	c := sc.c
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		c.mu.Lock()
		n := len(c.sb)
		c.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the host side's data never reached the stack")
		}
	}
	// Fire the timer by hand, far more often than maxRetries, answering
	// each probe as the sandbox's kernel does: still no room.
	for i := range 2 * maxRetries {
		c.mu.Lock()
		c.stopTimer()
		c.mu.Unlock()
		c.expire()
		seg, ok := fs.nextTCP(time.Second)
		if !ok {
			t.Fatalf("no probe %d", i+1)
		}
		if seg.flags&flagRST != 0 {
			t.Fatalf("reset after %d answered probes", i)
		}
		if len(seg.payload) > 0 {
			t.Fatalf("data into a closed window: %+v", seg)
		}
		sc.send(flagACK, 0, nil)
		// The stack reads that answer on its own goroutine: let it, or the
		// next expire would count as unanswered.
		for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
			c.mu.Lock()
			answered := c.retries == 0
			c.mu.Unlock()
			if answered {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("probe %d: the answer was never processed", i+1)
			}
		}
	}
	// The window opens and the data flows (after any probe the timer
	// sent meanwhile).
	sc.send(flagACK, 0xffff, nil)
	for {
		seg, ok := fs.nextTCP(3 * time.Second)
		if !ok || seg.flags&flagRST != 0 {
			t.Fatalf("after the window opened: %+v %v", seg, ok)
		}
		if len(seg.payload) > 0 {
			if string(seg.payload) != "hello" {
				t.Errorf("after the window opened: %q", seg.payload)
			}
			break
		}
	}
}

// A SYN on a connection the stack still holds (the sandbox forgot it: its
// reset was lost, or it reuses the port) was ignored, so the sandbox's new
// connection hung until its SYN retries ran out. It must get an ACK, to
// which the sandbox answers with the reset that frees the entry.
func TestTCPSynOnEstablishedGetsChallengeAck(t *testing.T) {
	fs := hostLoopback(t)
	dst, conns := listen(t)
	sc := fs.connect(dst, 30002, 7000, 0xffff, nil)
	accepted(t, conns)
	fs.sendTCP(sc.src, dst, 123456, 0, flagSYN, 0xffff, nil, nil) // a new connection, same ports
	seg, ok := fs.nextTCP(2 * time.Second)
	if !ok || seg.flags&(flagSYN|flagRST) != 0 || seg.flags&flagACK == 0 || seg.ack != sc.sndNxt {
		t.Fatalf("answer to a SYN on an established connection: %+v %v, want an ACK of %d", seg, ok, sc.sndNxt)
	}
	fs.sendTCP(sc.src, dst, seg.ack, 0, flagRST, 0, nil, nil)
	fs.sendTCP(sc.src, dst, 123456, 0, flagSYN, 0xffff, nil, nil)
	seg, ok = fs.nextTCP(3 * time.Second)
	if !ok || seg.flags != flagSYN|flagACK || seg.ack != 123457 {
		t.Errorf("the SYN after the reset: %+v %v, want a SYN-ACK", seg, ok)
	}
}

// Keepalive and zero-window probes (no data, the sequence number one below
// what was acknowledged) got no answer: the sandbox's kernel then times
// the connection out, after 2.5 minutes of idleness for Go programs
// (keepalive after 15s, 9 probes 15s apart) or when the host side is slow
// to read for long enough.
func TestTCPAnswersKeepaliveProbes(t *testing.T) {
	fs := hostLoopback(t)
	dst, conns := listen(t)
	sc := fs.connect(dst, 30007, 9000, 0xffff, nil)
	accepted(t, conns)
	fs.sendTCP(sc.src, dst, sc.sndNxt-1, sc.rcvNxt, flagACK, 0xffff, nil, nil)
	seg, ok := fs.nextTCP(2 * time.Second)
	if !ok || seg.flags != flagACK || seg.ack != sc.sndNxt {
		t.Fatalf("answer to a keepalive probe: %+v %v, want an ACK of %d", seg, ok, sc.sndNxt)
	}
	// A plain ACK gets none: that would loop.
	sc.send(flagACK, 0xffff, nil)
	if seg, ok := fs.nextTCP(300 * time.Millisecond); ok {
		t.Errorf("answer to a plain ACK: %+v", seg)
	}
}

// Sequence numbers that wrap past 2^32 in the middle of the data.
func TestTCPSequenceWraparound(t *testing.T) {
	fs := hostLoopback(t)
	dst, conns := listen(t)
	sc := fs.connect(dst, 30003, 0xffffff00, 0xffff, nil)
	up := accepted(t, conns)
	data := make([]byte, 1000)
	for i := range data {
		data[i] = byte(i)
	}
	sc.send(flagACK, 0xffff, data[:200]) // 0xffffff01..0x000000c9
	sc.send(flagACK, 0xffff, data[200:])
	sc.send(flagACK|flagFIN, 0xffff, nil)
	up.SetReadDeadline(time.Now().Add(3 * time.Second))
	got, err := io.ReadAll(up)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("host side got %d bytes (%v), want the 1000 sent", len(got), err)
	}
}

// Each segment took a pooled 64 KiB buffer however small it was, while the
// window counts payload bytes: a sandbox sending 1-byte segments to a slow
// host side pinned 64 KiB of pinfold's memory per byte, up to 256 GiB per
// connection.
func TestTCPSmallSegmentsShareBuffers(t *testing.T) {
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	s := &Stack{tun: devnull, tcp: map[flowKey]*tcpConn{}}
	c := &tcpConn{s: s, st: stEstablished, rcvNxt: 1, mss: 1000}
	c.cond.L = &c.mu
	c.mu.Lock()
	defer c.mu.Unlock()
	const n = 1000
	for i := range n {
		c.receive(&tcpSeg{seq: uint32(1 + i), flags: flagACK | flagPSH, payload: []byte{byte(i)}})
	}
	var got []byte
	held := 0
	for _, b := range c.rq {
		got = append(got, b...)
		held += cap(b)
	}
	if len(got) != n || c.rqBytes != n || c.rcvNxt != 1+n {
		t.Fatalf("queued %d bytes (rqBytes %d, rcvNxt %d), want %d", len(got), c.rqBytes, c.rcvNxt, n)
	}
	for i, b := range got {
		if b != byte(i) {
			t.Fatalf("byte %d is %d", i, b)
		}
	}
	if held > 2*(64<<10) {
		t.Errorf("%d one-byte segments hold %d KiB of buffers", n, held>>10)
	}
}

// The loop could be past its closed check when Close ran: the connection
// it then opened was in no list Close saw, so after Close a host socket
// stayed connected and a timer went on resending the SYN-ACK for over a
// minute.
func TestTCPNoConnectionAfterClose(t *testing.T) {
	fs := hostLoopback(t)
	dst, conns := listen(t)
	fs.s.Close()
	key := flowKey{netip.AddrPortFrom(SandboxAddr, 30004), dst}
	fs.s.tcpOpen(key, &tcpSeg{srcPort: 30004, dstPort: dst.Port(), seq: 1, flags: flagSYN, wscale: -1})
	fs.s.wg.Wait()
	fs.s.mu.Lock()
	n := len(fs.s.tcp)
	fs.s.mu.Unlock()
	if n != 0 {
		t.Errorf("%d connections in the table after Close", n)
	}
	select {
	case <-conns:
		t.Error("a host-side connection was opened after Close")
	case <-time.After(200 * time.Millisecond):
	}
	var left []*tcpConn
	fs.s.mu.Lock()
	for _, c := range fs.s.tcp {
		left = append(left, c)
	}
	fs.s.mu.Unlock()
	for _, c := range left {
		c.mu.Lock()
		c.closeLocked()
		c.mu.Unlock()
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
	// Upstream resolvers that never answer.
	var upstreams []netip.AddrPort
	for range 3 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		upstreams = append(upstreams, netip.MustParseAddrPort(pc.LocalAddr().String()))
	}
	fs := newFakeSandbox(t, Config{Mode: Outbound, HostLoopback: true, DNS: upstreams})
	fs.sendTCP(netip.AddrPortFrom(SandboxAddr, 30005), netip.AddrPortFrom(HostAddr, uint16(port)), 1, 0, flagSYN, 0xffff, nil, nil)
	fs.f.Write(udpPacket(netip.AddrPortFrom(SandboxAddr, 30006), netip.AddrPortFrom(DNSAddr, 53), query("example.org")))
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	fs.s.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d.Round(100*time.Millisecond))
	}
}

// udpPacket builds a datagram from the sandbox.
func udpPacket(src, dst netip.AddrPort, payload []byte) []byte {
	hl := ipHeaderLen(src.Addr().Is6())
	buf := make([]byte, hl+udpHeader+len(payload))
	u := buf[hl:]
	be.PutUint16(u, src.Port())
	be.PutUint16(u[2:], dst.Port())
	be.PutUint16(u[4:], uint16(udpHeader+len(payload)))
	copy(u[udpHeader:], payload)
	be.PutUint16(u[6:], l4Checksum(src.Addr(), dst.Addr(), protoUDP, u))
	writeIP(buf, src.Addr(), dst.Addr(), protoUDP, len(u))
	return buf
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
// socket for as long as the upstream took, without bound, unlike TCP
// connections and UDP flows: a sandbox could exhaust pinfold's descriptors.
func TestDNSQueriesInFlightAreBounded(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0") // never answers
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	fs := newFakeSandbox(t, Config{Mode: Outbound, DNS: []netip.AddrPort{netip.MustParseAddrPort(pc.LocalAddr().String())}})
	before := runtime.NumGoroutine()
	const n = 3000
	for i := range n {
		pkt := udpPacket(netip.AddrPortFrom(SandboxAddr, uint16(10000+i)), netip.AddrPortFrom(DNSAddr, 53), query(fmt.Sprintf("n%d.example.org", i)))
		if _, err := fs.f.Write(pkt); err != nil {
			t.Fatal(err)
		}
	}
	// The loop has read every query once the socket pair is empty.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if q, _ := unix.IoctlGetInt(int(fs.f.Fd()), unix.SIOCOUTQ); q == 0 {
			break
		}
	}
	time.Sleep(100 * time.Millisecond)
	if g := runtime.NumGoroutine() - before; g > 2*maxDNSInFlight {
		t.Errorf("%d goroutines for %d unanswered queries", g, n)
	}
}

// With the network none (published ports only), --host-loopback opened
// the host's loopback to the sandbox: 10.0.2.2 is on the link, so it needs
// no default route. The docs: it needs outbound or allow; with none
// nothing goes out.
func TestNoneIgnoresHostLoopback(t *testing.T) {
	s := &Stack{cfg: Config{Mode: None, HostLoopback: true}, learned: map[netip.Addr]string{}}
	for _, kind := range []string{"tcp", "udp", "icmp"} {
		for _, a := range []netip.Addr{HostAddr, HostAddr6, netip.AddrFrom16(HostAddr.As16())} {
			if d := s.decide(kind, netip.AddrPortFrom(a, 5432)); d.ok {
				t.Errorf("%s to %s with the network none: allowed (to %s)", kind, a, d.to)
			}
		}
	}
}

// violate wrote to Config.Log from the loop, the DNS goroutines and the
// connections' writers at once: a plain writer such as a bytes.Buffer (the
// sandbox package's own test uses one) raced and could lose or mangle
// lines.
func TestViolationLogWritesAreSerialized(t *testing.T) {
	log := &overlapWriter{}
	s := &Stack{cfg: Config{Log: log}, vindex: map[string]int{}}
	const workers, each = 8, 20
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				s.violate(Violation{Kind: "dns", Name: fmt.Sprintf("w%d-%d.example", w, i), Reason: "denied"})
			}
		}()
	}
	wg.Wait()
	if log.overlaps.Load() > 0 {
		t.Errorf("%d writes to the log overlapped another", log.overlaps.Load())
	}
	lines := bytes.Split(bytes.TrimSuffix(log.buf.Bytes(), []byte("\n")), []byte("\n"))
	if len(lines) != workers*each {
		t.Fatalf("%d lines logged, want %d", len(lines), workers*each)
	}
	for _, l := range lines {
		var v Violation
		if err := json.Unmarshal(l, &v); err != nil {
			t.Fatalf("mangled line %q: %v", l, err)
		}
	}
}

// overlapWriter is a bytes.Buffer that counts writes made while another
// is under way (each takes a moment, as a file's might).
type overlapWriter struct {
	busy, overlaps atomic.Int32
	buf            bytes.Buffer
}

func (w *overlapWriter) Write(b []byte) (int, error) {
	if w.busy.Add(1) > 1 {
		w.overlaps.Add(1)
		w.busy.Add(-1)
		return len(b), nil // don't touch buf: the race would be the test's own
	}
	defer w.busy.Add(-1)
	time.Sleep(100 * time.Microsecond)
	return w.buf.Write(b)
}
