package native_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/internal/nettest"
	"github.com/pinfold/pinfold/sandbox"
)

// lenientServer is Python's http.server, which reads request lines the
// most leniently of the common servers (any method, any white space
// between the words), serving every method with keep-alive. It logs the
// Host of each request it serves and each connection it accepts.
const lenientServer = `
import http.server, json, socketserver, sys
addr, log, conns, ready = sys.argv[1:5]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def __getattr__(self, name):
        if name.startswith("do_"):
            return self.serve
        raise AttributeError(name)
    def serve(self):
        with open(log, "a") as f:
            f.write(json.dumps([self.command, self.path, self.headers.get("Host")]) + "\n")
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *a):
        pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    def get_request(self):
        c = super().get_request()
        with open(conns, "a") as f:
            f.write("conn\n")
        return c
s = S((addr, 8080), H)
open(ready, "w").close()
s.serve_forever()
`

type lenientLog struct{ dir string }

// startLenient runs the Python server on the test host, port 8080.
func startLenient(t *testing.T, e *nettest.Env) lenientLog {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("needs python3 (its http.server is the lenient server)")
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "server.py")
	if err := os.WriteFile(script, []byte(lenientServer), 0o644); err != nil {
		t.Fatal(err)
	}
	l := lenientLog{dir}
	cmd := exec.Command("ip", "netns", "exec", e.Host.NS, py, script, e.Host.Addr, l.path("log"), l.path("conns"), l.path("ready"))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(l.path("ready")); err == nil {
			return l
		}
		if time.Now().After(end) {
			t.Fatal("the Python server did not start")
		}
	}
}

func (l lenientLog) path(name string) string { return filepath.Join(l.dir, name) }

// served returns the hosts of the requests served and the connections
// accepted since the last reset, and resets.
func (l lenientLog) served(t *testing.T) (hosts []string, conns int) {
	time.Sleep(200 * time.Millisecond) // the server writes after it reads
	b, _ := os.ReadFile(l.path("log"))
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var r []*string
		if err := json.Unmarshal([]byte(line), &r); err != nil || len(r) != 3 {
			t.Fatalf("log line %q: %v", line, err)
		}
		h := "(none)"
		if r[2] != nil {
			h = *r[2]
		}
		hosts = append(hosts, h)
	}
	c, _ := os.ReadFile(l.path("conns"))
	conns = strings.Count(string(c), "conn")
	os.WriteFile(l.path("log"), nil, 0o644)
	os.WriteFile(l.path("conns"), nil, 0o644)
	return hosts, conns
}

// TestGuardRefusesWhatLenientServersRead sends, from a sandbox allowed
// to reach ok.test only, what a lenient server reads as a request for
// another host, or what the name check cannot read at all: none of it
// reaches the server with another Host (nor, sent alone, at all), and each
// is a violation. bad.test resolves to the same address as ok.test.
func TestGuardRefusesWhatLenientServersRead(t *testing.T) {
	e := nettest.NewEnvWith(t, map[string][]string{"ok.test": {nettest.TestHostAddr}, "bad.test": {nettest.TestHostAddr}})
	l := startLenient(t, e)
	spec := allowSpec(e, "ok.test")
	keptAlive := func(first, second string) string {
		return fmt.Sprintf(`exec 3<>/dev/tcp/ok.test/8080; printf %%s %s >&3; sleep 0.5; printf %%s %s >&3; timeout 2 cat <&3`, shellQuote(first), shellQuote(second))
	}
	longMethod := strings.Repeat("A", 40)
	for _, c := range []struct {
		name   string
		data   string // sent in one write, or
		script string // a shell script run in the sandbox
		raw    bool   // allowed as tcp:ok.test
		opens  bool   // a first request for ok.test goes through
	}{
		{name: "long method", data: longMethod + " /secret HTTP/1.1\r\nHost: bad.test\r\n\r\n"},
		{name: "tab separators", data: "GET\t/secret\tHTTP/1.1\r\nHost: bad.test\r\n\r\n"},
		{name: "a bad Host on a kept-alive connection", script: keptAlive(longMethod+" / HTTP/1.1\r\nHost: ok.test\r\n\r\n", "GET /secret HTTP/1.1\r\nHost: bad.test\r\n\r\n")},
		{name: "Kelvin sign Host", data: "GET /secret HTTP/1.1\r\nHost: o\u212a.test\r\n\r\n"},
		{name: "unrecognised bytes", data: "\x00\x00\x00\x08\x04\xd2\x16\x2f"},
		{name: "unrecognised line", data: "SSH-2.0-OpenSSH_9.6\r\n"},
		{name: "h2c prior knowledge", data: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"},
		{name: "h2c upgrade", data: "GET /secret HTTP/1.1\r\nHost: ok.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n"},
		{name: "the allowed name's address as Host", data: "GET /secret HTTP/1.1\r\nHost: " + e.Host.Addr + "\r\n\r\n"},
		// Python reads the hello's bytes as a method, the text in its
		// extension as the rest of the request.
		{name: "a TLS hello for ok.test with a request in it", data: string(nettest.LenientHello("ok.test", " /secret HTTP/1.1\r\nHost: bad.test\r\n\r\n"))},
		{name: "binary, then a request line, allowed raw", data: "\x00\x01 /secret HTTP/1.1\r\nHost: bad.test\r\n\r\n", raw: true},
		// Python's http.server does not read chunked bodies: the chunk
		// line is its next request line.
		{name: "a chunk extension", data: "POST / HTTP/1.1\r\nHost: ok.test\r\nTransfer-Encoding: chunked\r\n\r\n12;x /secret HTTP/1.1\r\nHost: bad.test\r\n\r\n\r\n0\r\n\r\n", opens: true},
	} {
		spec := spec
		if c.raw {
			spec = allowSpec(e, "tcp:ok.test")
		}
		var res *sandbox.Result
		if c.script != "" {
			res, _, _ = run(t, spec, &sandbox.Cmd{Args: []string{"bash", "-c", c.script}})
		} else {
			_, res = netRun(t, spec, "raw", "ok.test:8080", strconv.Quote(c.data))
		}
		hosts, conns := l.served(t)
		for _, h := range hosts {
			if h != "ok.test" {
				t.Errorf("%s: the server served a request for %q (all: %q)", c.name, h, hosts)
			}
		}
		if c.script == "" && !c.opens && conns != 0 {
			t.Errorf("%s: the server accepted %d connections (served %q)", c.name, conns, hosts)
		}
		found := false
		for _, v := range res.Violations {
			found = found || v.Kind == "tcp"
		}
		if !found {
			t.Errorf("%s: no tcp violation: %+v", c.name, res.Violations)
		}
	}
	// What is right still goes: a plain request for ok.test, and with
	// "tcp:ok.test" a protocol the check does not read.
	a, res := netRun(t, spec, "raw", "ok.test:8080", strconv.Quote("GET / HTTP/1.1\r\nHost: ok.test\r\nConnection: close\r\n\r\n"))
	if hosts, _ := l.served(t); len(hosts) != 1 || hosts[0] != "ok.test" || len(res.Violations) != 0 {
		t.Errorf("a request for ok.test: served %q, answer %q, violations %+v", hosts, a.Out, res.Violations)
	}
	a, res = netRun(t, allowSpec(e, "tcp:ok.test"), "raw", "ok.test:8080", strconv.Quote("SSH-2.0-OpenSSH_9.6\r\n"))
	if _, conns := l.served(t); conns != 1 || len(res.Violations) != 0 || !strings.Contains(a.Out, "400") {
		t.Errorf("tcp:ok.test: %d connections, answer %q, violations %+v", conns, a.Out, res.Violations)
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
