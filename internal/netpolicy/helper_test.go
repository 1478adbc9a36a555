package netpolicy

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// The network helper's messages: what the supervisor sends and what the
// helper answers come back as they were sent.
func TestHelperMessageRoundTrip(t *testing.T) {
	for _, m := range []Message{
		{Config: &WireConfig{Mode: "allow", Allow: []string{"example.com", "*.example.org", "10.0.0.0/8"}, Deny: []string{"tcp:bad.example"},
			HostLoopback: true, Publish: []wirePublish{{Host: "127.0.0.1:8080", Port: 80}}, DNS: []string{"[::1]:53"}}},
		{Ready: true}, {Error: "e", Publish: "0.0.0.0:80"}, {Bye: true}, {Hello: true}, {TUN: true},
		{Violation: &Violation{Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Kind: "tcp", Name: "n", Addr: "192.0.2.1:443", Rule: "r", Reason: "why", Count: 2}},
		{Report: &Report{Log: "/run.log", Logged: 3}},
	} {
		var back Message
		if err := json.Unmarshal(m.Marshal(), &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, m) {
			t.Errorf("got %+v, want %+v", back, m)
		}
	}
}

// FuzzHelperMessage: a packet of any bytes decodes or is refused without
// panicking; a decoded message encodes to one that decodes the same; and a
// configuration the helper accepts goes back on the wire and is accepted
// again as the same configuration.
func FuzzHelperMessage(f *testing.F) {
	for _, s := range []string{
		`{"config":{"mode":"allow","allow":["example.com","*.example.org","tcp:db.internal","10.0.0.0/8"],"deny":["169.254.169.254"],"host_loopback":true,"publish":[{"host":"127.0.0.1:8080","port":80}],"dns":["1.1.1.1:53"]}}`,
		`{"config":{"mode":"outbound","deny":["*.evil.example"]}}`,
		`{"config":{"mode":"none","publish":[{"host":"[::1]:9000","port":9000}]}}`,
		`{"violation":{"time":"2026-01-02T03:04:05.000000006+01:00","kind":"dns","name":"x.example","reason":"not allowed","count":1}}`,
		`{"report":{"log":"/tmp/run.log","logged":-1}}`, `{"tun":true}`, `{"error":"e","publish":"0.0.0.0:80"}`, `{"config":{"mode":"bogus"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Message
		if json.Unmarshal(b, &m) != nil {
			return
		}
		enc := m.Marshal()
		var back Message
		if err := json.Unmarshal(enc, &back); err != nil {
			t.Fatalf("%s does not decode: %v", enc, err)
		}
		if again := back.Marshal(); !bytes.Equal(again, enc) {
			t.Fatalf("%s came back as %s", enc, again)
		}
		if m.Config == nil {
			return
		}
		c, err := m.Config.Config()
		if err != nil {
			return
		}
		c2, err := c.Wire().Config()
		if err != nil {
			t.Fatalf("an accepted configuration %+v is refused once sent back: %v", m.Config, err)
		}
		if !reflect.DeepEqual(c2, c) {
			t.Fatalf("configuration %+v came back as %+v", c, c2)
		}
	})
}
