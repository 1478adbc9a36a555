package netstack

import (
	"bytes"
	"crypto/sha256"
	"io"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/pinfold/pinfold/internal/netpolicy"
)

// The relay (no copy buffer, the stack reading the host socket itself)
// carries every byte both ways, in order, and passes each side's end of
// file on while the other direction goes on: the sandbox half-closes its
// upload and still reads the whole download, and a sandbox that reads
// slowly (a zero window for a while) loses nothing.
func TestRealKernelRelayBothWaysAndHalfClose(t *testing.T) {
	rs := newRealSandbox(t, netpolicy.Config{Mode: netpolicy.Outbound, HostLoopback: true})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	down := make([]byte, 24<<20)
	for i := range down {
		down[i] = byte(i*13/7 + i>>16)
	}
	upSum := make(chan [32]byte, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		// Everything the sandbox sends, to its end of file; then the
		// download, then this side's end of file.
		h := sha256.New()
		io.Copy(h, c)
		var s [32]byte
		copy(s[:], h.Sum(nil))
		upSum <- s
		c.Write(down)
	}()
	var c net.Conn
	rs.inside(t, func() (err error) {
		c, err = net.DialTimeout("tcp", netip.AddrPortFrom(netpolicy.HostAddr, uint16(l.Addr().(*net.TCPAddr).Port)).String(), 3*time.Second)
		return err
	})
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	up := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB
	if _, err := c.Write(up); err != nil {
		t.Fatalf("upload: %v", err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-upSum:
		if s != sha256.Sum256(up) {
			t.Fatal("the host got other bytes than the sandbox sent")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the host never saw the upload's end of file")
	}
	// A slow reader first: the stack must wait for the window, not drop.
	time.Sleep(2 * time.Second)
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("download after %d bytes: %v", len(got), err)
	}
	if !bytes.Equal(got, down) {
		t.Fatalf("the sandbox got %d bytes, not the %d sent (or other bytes)", len(got), len(down))
	}
}

// fdbased never closed the eventfd it stops a device's reader with, so a
// shared helper kept a descriptor for every sandbox it had served.
func TestCloseLeavesNoDescriptors(t *testing.T) {
	before := eventfds(t)
	rs := newRealSandbox(t, netpolicy.Config{Mode: netpolicy.Outbound})
	if len(rs.s.stopFDs) == 0 {
		t.Fatal("no stop eventfd found in fdbased's endpoint: has its layout changed? (see stopFDs)")
	}
	if got := eventfds(t); got <= before {
		t.Fatalf("%d eventfds with a stack, %d before", got, before)
	}
	rs.s.Close()
	if got := eventfds(t); got != before {
		t.Fatalf("%d eventfds after Close, %d before", got, before)
	}
}

func eventfds(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l == "anon_inode:[eventfd]" {
			n++
		}
	}
	return n
}
