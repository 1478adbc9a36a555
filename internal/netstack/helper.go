package netstack

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"

	"github.com/pinfold/pinfold/internal/netpolicy"
)

// Main is the pinfold-net helper: the supervisor hands it the control
// socket as fd 3 and the sandbox's TUN device as fd 4 (see netpolicy's
// helper.go for the protocol). It serves until the control socket closes
// and returns the exit status.
func Main() int {
	ctl := os.NewFile(3, "ctl")
	const tunFD = 4
	var wmu sync.Mutex
	send := func(m *netpolicy.Message) {
		wmu.Lock()
		ctl.Write(m.Marshal())
		wmu.Unlock()
	}
	buf := make([]byte, 256<<10)
	n, err := ctl.Read(buf)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pinfold-net: reading the configuration:", err)
		return 2
	}
	var m netpolicy.Message
	if err := json.Unmarshal(buf[:n], &m); err != nil || m.Config == nil {
		send(&netpolicy.Message{Error: "a malformed configuration"})
		return 2
	}
	cfg, err := m.Config.Config()
	if err != nil {
		send(&netpolicy.Message{Error: err.Error()})
		return 2
	}
	pol := netpolicy.NewPolicy(cfg)
	pol.OnViolation = func(v netpolicy.Violation) { send(&netpolicy.Message{Violation: &v}) }
	srv, err := Serve(pol, tunFD)
	if err != nil {
		send(&netpolicy.Message{Error: err.Error()})
		return 1
	}
	send(&netpolicy.Message{Ready: true})
	for {
		if _, err := ctl.Read(buf); err != nil {
			break
		}
	}
	srv.Close()
	return 0
}
