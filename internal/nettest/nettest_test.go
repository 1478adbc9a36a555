package nettest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// A slot whose link another process holds is passed over: the host gets
// the next, and works. (Slots computed from process ids collided.)
func TestNewHostSkipsTakenSlot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8)")
	}
	// The slot the next host tries first.
	n := (os.Getpid()*7+int(netSeq.Load())+1)%hostSlots + 1
	taken := fmt.Sprintf("pfh%d", n)
	out, err := exec.Command("ip", "link", "add", taken, "type", "veth", "peer", "name", fmt.Sprintf("pft%d", os.Getpid())).CombinedOutput()
	switch {
	case err == nil:
		t.Cleanup(func() { exec.Command("ip", "link", "del", taken).Run() })
	case strings.Contains(string(out), "File exists"):
		// Taken already (a host being removed still holds its link
		// for a while after ip netns del).
	default:
		t.Fatalf("ip link add %s: %v\n%s", taken, err, out)
	}
	h := NewHost(t)
	if h.Addr == fmt.Sprintf("10.231.%d.2", n) || h.Addr6 == fmt.Sprintf("fd99:%x::2", n) {
		t.Fatalf("the host took slot %d, whose link was taken: %+v", n, h)
	}
	h.Inside(t, func() {
		l, err := net.Listen("tcp", "["+h.Addr6+"]:7000")
		if err != nil {
			t.Error(err)
			return
		}
		EchoTCP(t, l)
	})
	c, err := net.DialTimeout("tcp", "["+h.Addr6+"]:7000", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}
