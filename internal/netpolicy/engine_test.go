package netpolicy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// With the network none (published ports only), --host-loopback opened
// the host's loopback to the sandbox: 10.0.2.2 is on the link, so it needs
// no default route. The docs: it needs outbound or allow; with none
// nothing goes out.
func TestNoneIgnoresHostLoopback(t *testing.T) {
	p := NewPolicy(Config{Mode: None, HostLoopback: true})
	for _, kind := range []string{"tcp", "udp", "icmp"} {
		for _, a := range []netip.Addr{HostAddr, HostAddr6, netip.AddrFrom16(HostAddr.As16())} {
			if d := p.Decide(kind, netip.AddrPortFrom(a, 5432)); d.OK {
				t.Errorf("%s to %s with the network none: allowed (to %s)", kind, a, d.To)
			}
		}
	}
}

// The host's own addresses, in every form, are blocked in allow and
// outbound unless --host-loopback.
func TestHostOwnAddresses(t *testing.T) {
	self := netip.MustParseAddr("192.0.2.10")
	self6 := netip.MustParseAddr("2001:db8::10")
	for _, mode := range []Mode{Allow, Outbound} {
		rules, _ := ParseRules([]string{"self.test", "192.0.2.0/24"}, nil)
		p := NewPolicy(Config{Mode: mode, Rules: rules})
		p.HostAddr = func(a netip.Addr) bool { return a == self || a == self6 }
		p.Learn("self.test", []netip.Addr{self, self6})
		for _, a := range []netip.Addr{self, self6, netip.AddrFrom16(self.As16())} {
			if d := p.Decide("tcp", netip.AddrPortFrom(a, 22)); d.OK {
				t.Errorf("%s: %s allowed", mode, a)
			}
		}
		p = NewPolicy(Config{Mode: mode, Rules: rules, HostLoopback: true})
		p.HostAddr = func(a netip.Addr) bool { return a == self }
		p.Learn("self.test", []netip.Addr{self})
		if d := p.Decide("tcp", netip.AddrPortFrom(self, 22)); !d.OK {
			t.Errorf("%s with --host-loopback: refused: %+v", mode, d.V)
		}
	}
}

func TestDecideInspectsLearnedConnections(t *testing.T) {
	rules, _ := ParseRules([]string{"api.test", "198.51.100.0/24"}, nil)
	p := NewPolicy(Config{Mode: Allow, Rules: rules})
	a := netip.MustParseAddr("203.0.113.5")
	if d := p.Decide("tcp", netip.AddrPortFrom(a, 443)); d.OK {
		t.Fatal("an unlearned address was allowed")
	}
	p.Learn("api.test", []netip.Addr{a})
	d := p.Decide("tcp", netip.AddrPortFrom(a, 443))
	if !d.OK || !d.Inspect || d.Name != "api.test" {
		t.Fatalf("learned: %+v", d)
	}
	if d := p.Decide("tcp", netip.AddrPortFrom(netip.MustParseAddr("198.51.100.9"), 443)); !d.OK || d.Inspect {
		t.Fatalf("a CIDR: %+v", d)
	}
	g := p.Guard(netip.AddrPortFrom(a, 80), d)
	// An address literal needs an --allow address or CIDR: the address
	// api.test resolved to is not enough (TestGuardAddressHost).
	for host, want := range map[string]bool{"api.test": true, "other.test": false, "203.0.113.5": false, "203.0.113.6": false, "198.51.100.1": true} {
		if g.Allowed(host) != want {
			t.Errorf("guard allows %s: %v", host, !want)
		}
	}
}

// Violate wrote to Config.Log from several goroutines at once: a plain
// writer such as a bytes.Buffer raced and could lose or mangle lines.
func TestViolationLogWritesAreSerialized(t *testing.T) {
	log := &overlapWriter{}
	p := NewPolicy(Config{Log: log})
	const workers, each = 8, 20
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				p.Violate(Violation{Kind: "dns", Name: fmt.Sprintf("w%d-%d.example", w, i), Reason: "denied"})
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
