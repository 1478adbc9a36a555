package native_test

import (
	"crypto/sha256"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinfold/pinfold/internal/nettest"
	"github.com/pinfold/pinfold/sandbox"
)

// hostSeen is an HTTP server that records the Host of every request it
// serves and counts the connections it accepts.
type hostSeen struct {
	accepts atomic.Int32
	mu      sync.Mutex
	hosts   []string
}

func (h *hostSeen) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.hosts...)
}

// await returns the hosts served once there are n, or after 3 s, and a
// moment later, so that more than n show.
func (h *hostSeen) await(n int) []string {
	for end := time.Now().Add(3 * time.Second); len(h.seen()) < n && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	return h.seen()
}

// countingListener counts accepted connections.
type countingListener struct {
	net.Listener
	n *atomic.Int32
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func (h *hostSeen) serve(t *testing.T, l net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.hosts = append(h.hosts, r.Host)
		h.mu.Unlock()
		if r.Header.Get("Upgrade") == "websocket" {
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, "ok")
	})}
	t.Cleanup(func() { srv.Close() })
	go srv.Serve(countingListener{l, &h.accepts})
}

// guardEnv is a test host with an HTTP server on port 8080 behind the
// names allowed.test (allowed) and other.test (not allowed).
func guardEnv(t *testing.T) (*nettest.Env, *hostSeen) {
	e := nettest.NewEnv(t)
	h := &hostSeen{}
	e.Host.Inside(t, func() {
		for _, a := range []string{e.Host.Addr, "[" + e.Host.Addr6 + "]"} {
			l, err := net.Listen("tcp", a+":8080")
			if err != nil {
				t.Fatal(err)
			}
			h.serve(t, l)
		}
	})
	return e, h
}

// raw sends data to allowed.test:8080 from a sandbox allowed to reach
// allowed.test only, and returns the answer.
func raw(t *testing.T, e *nettest.Env, data string) (nettest.Answer, *sandbox.Result) {
	t.Helper()
	return netRun(t, allowSpec(e, "allowed.test"), "raw", "allowed.test:8080", strconv.Quote(data))
}

func TestGuardRefusesBypasses(t *testing.T) {
	big := strings.Repeat("X-Pad: "+strings.Repeat("a", 1000)+"\r\n", 70)
	for _, c := range []struct {
		name, data string
	}{
		{"headers past 64 KiB before Host", "GET /secret HTTP/1.1\r\n" + big + "Host: other.test\r\n\r\n"},
		{"two Host headers", "GET /secret HTTP/1.1\r\nHost: allowed.test\r\nHost: other.test\r\n\r\n"},
		{"absolute URI for another host", "GET http://other.test/secret HTTP/1.1\r\nHost: allowed.test\r\n\r\n"},
		{"HTTP/0.9", "GET /secret\r\n"},
		{"CONNECT", "CONNECT other.test:8080 HTTP/1.1\r\nHost: allowed.test\r\n\r\n"},
		{"content-length and chunked", "POST / HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /secret HTTP/1.1\r\nHost: other.test\r\n\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, h := guardEnv(t)
			a, res := raw(t, e, c.data)
			if strings.Contains(a.Out, "200 OK") {
				t.Errorf("answered: %q", a.Out)
			}
			if n := h.accepts.Load(); n != 0 {
				t.Errorf("the server accepted %d connections for a refused request (hosts %v)", n, h.seen())
			}
			found := false
			for _, v := range res.Violations {
				found = found || v.Kind == "tcp" && strings.Contains(v.Reason, "allowed.test")
			}
			if !found {
				t.Errorf("no violation reported: %+v", res.Violations)
			}
		})
	}
}

func TestGuardChecksEveryRequest(t *testing.T) {
	first := "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n"
	second := "GET /secret HTTP/1.1\r\nHost: other.test\r\n\r\n"
	// Pipelined: both in one write.
	e, h := guardEnv(t)
	a, res := raw(t, e, first+second)
	// The sandbox's side is reset as soon as the first request went
	// upstream: the server may still be reading it when the run ends.
	if hosts := h.await(1); len(hosts) != 1 || !strings.HasPrefix(hosts[0], "allowed.test") {
		t.Errorf("pipelined: the server served %v", hosts)
	}
	if len(res.Violations) == 0 || strings.Count(a.Out, "200 OK") > 1 {
		t.Errorf("pipelined: %q %+v", a.Out, res.Violations)
	}
	// Kept alive: the second request after the first's answer.
	e, h = guardEnv(t)
	script := fmt.Sprintf(`exec 3<>/dev/tcp/allowed.test/8080; printf %q >&3; sleep 0.5; printf %q >&3; sleep 0.5; cat <&3`, first, second)
	var out strings.Builder
	spec := allowSpec(e, "allowed.test")
	res, _, _ = run(t, spec, &sandbox.Cmd{Args: []string{"bash", "-c", script}, Stdout: &out})
	if hosts := h.seen(); len(hosts) != 1 || !strings.HasPrefix(hosts[0], "allowed.test") {
		t.Errorf("kept alive: the server served %v", hosts)
	}
	if len(res.Violations) == 0 {
		t.Errorf("kept alive: no violation")
	}
}

func TestGuardLetsGoodClientsThrough(t *testing.T) {
	e, h := guardEnv(t)
	reqs := "GET /1 HTTP/1.1\r\nHost: allowed.test:8080\r\n\r\n" +
		"POST /2 HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 5\r\n\r\nhello" +
		"POST /3 HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n" +
		"GET /4 HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n"
	a, res := raw(t, e, reqs)
	if got := strings.Count(a.Out, "200 OK"); got != 4 || len(res.Violations) != 0 {
		t.Errorf("%d answers, violations %+v: %q", got, res.Violations, a.Out)
	}
	if len(h.seen()) != 4 {
		t.Errorf("served %v", h.seen())
	}
	// A plain tool: curl keeps its connection alive across two URLs.
	var out strings.Builder
	res, _, _ = run(t, allowSpec(e, "allowed.test"), &sandbox.Cmd{Args: []string{"curl", "-sS", "http://allowed.test:8080/a", "http://allowed.test:8080/b"}, Stdout: &out})
	if res.ExitCode != 0 || out.String() != "okok" {
		t.Errorf("curl: %d %q", res.ExitCode, out.String())
	}
}

func TestHostsOwnAddressesUnreachable(t *testing.T) {
	var self netip.Addr
	if as, err := net.InterfaceAddrs(); err == nil {
		for _, a := range as {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() && !p.Addr().IsLoopback() {
				self = p.Addr()
				break
			}
		}
	}
	if !self.IsValid() {
		t.Skip("the host has no non-loopback IPv4 address")
	}
	// A host service bound to every address.
	l, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	var accepts atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepts.Add(1)
			fmt.Fprint(c, "host service\n")
			c.Close()
		}
	}()
	e := nettest.NewEnvWith(t, map[string][]string{
		"self.test":   {self.String()},
		"mapped.test": {"::ffff:" + self.String()},
	})
	for _, name := range []string{"self.test", "mapped.test"} {
		for _, mode := range []sandbox.Network{sandbox.NetworkAllow, sandbox.NetworkOutbound} {
			spec := sandbox.Spec{Network: mode, Net: sandbox.NetPolicy{Allow: []string{name}, DNS: []string{e.DNS}}}
			if mode == sandbox.NetworkOutbound {
				spec.Net.Allow = nil
			}
			target := net.JoinHostPort(name, strconv.Itoa(port))
			a, res := netRun(t, spec, "tcp", target)
			if a.Err == "" || strings.Contains(a.Out, "host service") {
				t.Errorf("%s in %s reached the host: %q", name, mode, a.Out)
			}
			found := false
			for _, v := range res.Violations {
				found = found || strings.Contains(v.Reason, "host's own addresses")
			}
			if !found {
				t.Errorf("%s in %s: no violation naming the host's addresses: %+v", name, mode, res.Violations)
			}
		}
	}
	if n := accepts.Load(); n != 0 {
		t.Errorf("the host service accepted %d connections", n)
	}
	// --host-loopback lets the sandbox reach the host, its own
	// addresses included (raw: the service talks first, no HTTP).
	spec := sandbox.Spec{Network: sandbox.NetworkAllow, Net: sandbox.NetPolicy{Allow: []string{"tcp:self.test"}, DNS: []string{e.DNS}, HostLoopback: true}}
	a, _ := netRun(t, spec, "raw", net.JoinHostPort("self.test", strconv.Itoa(port)), strconv.Quote(""))
	if !strings.Contains(a.Out, "host service") {
		t.Errorf("with --host-loopback: %q %q", a.Out, a.Err)
	}
}

// A large answer on a guarded connection (the stack reads it from the
// server's socket itself, outside an upgrade) reaches the sandbox whole,
// and the guard still checks the request kept alive after it.
func TestGuardedDownloadIsWhole(t *testing.T) {
	e := nettest.NewEnv(t)
	big := make([]byte, 24<<20)
	for i := range big {
		big[i] = byte(i*31/7 + i>>20)
	}
	sum := sha256.Sum256(big)
	h := &hostSeen{}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.hosts = append(h.hosts, r.Host)
		h.mu.Unlock()
		if r.URL.Path == "/big" {
			w.Write(big)
			return
		}
		fmt.Fprint(w, "ok")
	})}
	t.Cleanup(func() { srv.Close() })
	e.Host.Inside(t, func() {
		for _, a := range []string{e.Host.Addr, "[" + e.Host.Addr6 + "]"} {
			l, err := net.Listen("tcp", a+":8080")
			if err != nil {
				t.Fatal(err)
			}
			go srv.Serve(l)
		}
	})
	var out strings.Builder
	script := `curl -sS http://allowed.test:8080/big | sha256sum; curl -sS http://allowed.test:8080/big http://allowed.test:8080/a | tail -c 2`
	res, _, errs := run(t, allowSpec(e, "allowed.test"), &sandbox.Cmd{Args: []string{"sh", "-c", script}, Stdout: &out})
	want := fmt.Sprintf("%x  -\nok", sum)
	if res.ExitCode != 0 || out.String() != want || len(res.Violations) != 0 {
		t.Errorf("exit %d, violations %+v, out %q (want %q), stderr %q", res.ExitCode, res.Violations, out.String(), want, errs)
	}
	if got := h.seen(); len(got) != 3 {
		t.Errorf("served %v", got)
	}
}
