package netpolicy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
)

// The network stack (gVisor's netstack, in internal/netstack) runs in a
// helper process, pinfold-net, so that the pinfold binary does not link
// it: its packages' initialisation would cost every pinfold start, most of
// which need no network. The supervisor starts the helper with one end of
// a SOCK_SEQPACKET socket pair (as soon as it knows the sandbox needs one,
// so that its start overlaps the sandbox's), and they exchange one JSON
// Message per packet on it:
//
//	supervisor -> helper   {"config": {...}}, then {"tun": true} carrying
//	                       the device (SCM_RIGHTS)
//	helper -> supervisor   {"ready": true} or {"error": "..."}, then
//	                       {"violation": {...}} as they happen, then
//	                       {"bye": true} once the supervisor's end shut
//
// A supervisor that hands its run off to the waiter (a small C program
// that only waits for the command) first sends {"report": {"log": PATH}}
// carrying its stderr (SCM_RIGHTS): from then on the helper appends the
// violations to the run's log at PATH itself (from the "logged"th it sent
// on), and before its last word it
// prints the summary the supervisor would have printed on that stderr.
// The waiter then only shuts its end and waits for the "bye".
//
// The helper stops when the supervisor's end shuts (at the end of the run,
// or when the supervisor dies); the supervisor does not wait for it to
// exit (dropping a sandbox's TUN device takes milliseconds).
//
// Starting a helper costs a process and a Go runtime on every run; so a
// helper also runs shared ("pinfold-net serve SOCKET", the socket in
// pinfold's store, named after the helper binary so that another build
// gets its own): a supervisor connects, is greeted with {"hello": true},
// and the protocol above follows on that connection. A supervisor that
// finds no shared helper starts one in the background for the runs after
// it and starts its own for this one; the shared helper exits after 30 s
// without a sandbox. PINFOLD_NET_SHARED=0 turns it off.

// HelperName is the helper's file name, looked up next to the pinfold
// binary (or PINFOLD_NET_HELPER).
const HelperName = "pinfold-net"

// Message is one message between the supervisor and the helper.
type Message struct {
	Config *WireConfig `json:"config,omitempty"`
	Ready  bool        `json:"ready,omitempty"`
	Error  string      `json:"error,omitempty"`
	// Publish is the host address a published port could not listen
	// on, with the reason in Error (see PublishError).
	Publish   string     `json:"publish,omitempty"`
	Violation *Violation `json:"violation,omitempty"`
	Bye       bool       `json:"bye,omitempty"`
	Hello     bool       `json:"hello,omitempty"` // a shared helper took the connection
	TUN       bool       `json:"tun,omitempty"`
	Report    *Report    `json:"report,omitempty"`
}

// PublishError is a published port the helper could not listen on: the
// host's address and port taken, say. The CLI tells the user to choose
// another host port.
type PublishError struct {
	Host string // HOSTADDR:HOSTPORT
	Err  error
}

func (e *PublishError) Error() string { return "publishing " + e.Host + ": " + e.Err.Error() }
func (e *PublishError) Unwrap() error { return e.Err }

// ErrorMessage is the message that reports err to the supervisor.
func ErrorMessage(err error) *Message {
	var pe *PublishError
	if errors.As(err, &pe) {
		return &Message{Error: pe.Err.Error(), Publish: pe.Host}
	}
	return &Message{Error: err.Error()}
}

// Err is the error a message with Error reports.
func (m *Message) Err() error {
	if m.Publish != "" {
		return &PublishError{Host: m.Publish, Err: errors.New(m.Error)}
	}
	return errors.New(m.Error)
}

// Report asks the helper to log the violations and print their summary
// (see above): Log is the run's log file, of which the supervisor wrote
// the first Logged violations it was sent.
type Report struct {
	Log    string `json:"log"`
	Logged int    `json:"logged,omitempty"`
}

// WireConfig is a Config as the helper receives it (Log stays with the
// supervisor, which writes the violations the helper reports).
type WireConfig struct {
	Mode         Mode          `json:"mode"`
	Allow        []string      `json:"allow,omitempty"`
	Deny         []string      `json:"deny,omitempty"`
	HostLoopback bool          `json:"host_loopback,omitempty"`
	Publish      []wirePublish `json:"publish,omitempty"`
	DNS          []string      `json:"dns,omitempty"`
}

type wirePublish struct {
	Host string `json:"host"`
	Port uint16 `json:"port"`
}

// Wire returns c as the helper receives it.
func (c *Config) Wire() *WireConfig {
	w := &WireConfig{Mode: c.Mode, HostLoopback: c.HostLoopback}
	for _, r := range c.Rules.Allow {
		w.Allow = append(w.Allow, r.Text)
	}
	for _, r := range c.Rules.Deny {
		w.Deny = append(w.Deny, r.Text)
	}
	for _, p := range c.Publish {
		w.Publish = append(w.Publish, wirePublish{Host: p.Host.String(), Port: p.Port})
	}
	for _, d := range c.DNS {
		w.DNS = append(w.DNS, d.String())
	}
	return w
}

// Config turns a received WireConfig back into a Config.
func (w *WireConfig) Config() (Config, error) {
	c := Config{Mode: w.Mode, HostLoopback: w.HostLoopback}
	if _, err := ParseMode(string(w.Mode)); err != nil {
		return c, err
	}
	var err error
	if c.Rules, err = ParseRules(w.Allow, w.Deny); err != nil {
		return c, err
	}
	for _, p := range w.Publish {
		h, err := netip.ParseAddrPort(p.Host)
		if err != nil {
			return c, fmt.Errorf("publish %q: %w", p.Host, err)
		}
		c.Publish = append(c.Publish, Publish{Host: h, Port: p.Port})
	}
	for _, d := range w.DNS {
		ap, err := netip.ParseAddrPort(d)
		if err != nil {
			return c, fmt.Errorf("dns %q: %w", d, err)
		}
		c.DNS = append(c.DNS, ap)
	}
	return c, nil
}

// Marshal encodes m for the socket.
func (m *Message) Marshal() []byte {
	b, _ := json.Marshal(m)
	return b
}
