package netstack

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/internal/netpolicy"
)

// Main is the pinfold-net helper: the supervisor hands it the control
// socket as fd 3, the configuration on it, then the sandbox's TUN device
// (see netpolicy's helper.go for the protocol). It serves until the
// control socket closes and returns the exit status.
func Main() int {
	ctl := os.NewFile(3, "ctl")
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
	// The stack is built while the sandbox is: the device follows, in a
	// message of its own.
	pol := netpolicy.NewPolicy(cfg)
	pol.OnViolation = func(v netpolicy.Violation) { send(&netpolicy.Message{Violation: &v}) }
	srv := New(pol)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(3, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil || n == 0 {
		return 2 // the supervisor went away
	}
	tunFD := -1
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(msgs) == 1 {
		if fds, err := unix.ParseUnixRights(&msgs[0]); err == nil && len(fds) == 1 {
			tunFD = fds[0]
		}
	}
	if tunFD < 0 {
		send(&netpolicy.Message{Error: "no network device received"})
		return 2
	}
	if err := srv.Attach(tunFD); err != nil {
		send(&netpolicy.Message{Error: err.Error()})
		return 1
	}
	send(&netpolicy.Message{Ready: true})
	for {
		if _, err := ctl.Read(buf); err != nil {
			break
		}
	}
	// Every violation went before this: the supervisor's run is over.
	send(&netpolicy.Message{Bye: true})
	ctl.Close()
	srv.Close()
	return 0
}
