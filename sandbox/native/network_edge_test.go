package native_test

import (
	"fmt"
	"net"
	"testing"

	"github.com/pinfold/pinfold/internal/nettest"
	"github.com/pinfold/pinfold/sandbox"
)

// With the network none and a published port, the sandbox gets the TUN
// device with 10.0.2.2 on its link; --host-loopback must not open the
// host's loopback there (it needs outbound or allow: with none nothing
// goes out).
func TestNetworkNoneIgnoresHostLoopback(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nettest.EchoTCP(t, l)
	port := fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pub := pl.Addr().(*net.TCPAddr).Port
	pl.Close()
	spec := sandbox.Spec{Network: sandbox.NetworkNone, Net: sandbox.NetPolicy{
		HostLoopback: true, Publish: []string{fmt.Sprintf("%d:8000", pub)}}}
	r, res := netRun(t, spec, "tcp", "10.0.2.2:"+port)
	wantBlocked(t, r, res, "tcp", "the host's loopback with the network none")
}
