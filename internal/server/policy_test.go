package server

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/pinfold/pinfold/client"
	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/internal/session"
	"github.com/pinfold/pinfold/sandbox"
)

// TestCreateRequestGrants walks every field of the create request: a
// tenant's non-empty value for a field that names a host resource (a
// path, variable, address, runtime) or asks past a limit is refused,
// unless the policy grants it; fields that name nothing of the host pass.
// A new field fails this test until it is given a decision here and in
// createFields.
func TestCreateRequestGrants(t *testing.T) {
	const (
		free    = "free"    // names nothing of the host
		never   = "never"   // a host path: no policy grants it
		granted = "granted" // refused unless the policy grants it
	)
	// The value a hostile tenant sends, and the policy that grants it.
	cases := map[string]struct {
		decision string
		value    any
		grant    string // the policy file's JSON granting value
	}{
		"name":         {free, "n", ""},
		"idle_timeout": {granted, "1000h", `{"limits":{"idle_timeout":"2000h"}}`},
		"workspace":    {never, "/etc", ""},
		"workdir":      {free, "/tmp", ""},
		"base":         {granted, "dir:/", `{"bases":["host","dir:/"]}`},
		"access":       {free, "ro", ""},
		"backend":      {granted, "docker", `{"backends":["native","docker"]}`},
		"network":      {granted, "host", `{"networks":["none","host"]}`},
		"allow":        {granted, []string{"127.0.0.1"}, `{"allow":["127.0.0.1"]}`},
		"deny":         {free, []string{"example.org"}, ""},
		"dns":          {granted, []string{"127.0.0.1:53"}, `{"dns":["127.0.0.1:53"]}`},
		"env":          {granted, []string{"HOME"}, `{"env":["HOME"]}`},
		"mounts":       {never, []string{"/root:/r"}, ""},
		"user":         {free, "root", ""},
		"hostname":     {free, "h", ""},
		"memory":       {granted, "64g", `{"limits":{"memory":"128g"}}`},
		"pids":         {granted, "100000", `{"limits":{"pids":200000}}`},
		"cpus":         {granted, "64", `{"limits":{"cpus":128}}`},
		"timeout":      {granted, "1000h", `{"limits":{"timeout":"2000h"}}`},
		"tmp_size":     {granted, "64g", `{"limits":{"tmp_size":"128g"}}`},
		"snapshot":     {free, "s", ""},
		"template":     {granted, "py", `{"templates":{"py":{}}}`},
	}
	def := DefaultPolicy()
	// The same requests over TCP with a tenant's token, to a real server.
	var log syncBuffer
	tcp := tcpTenant(t, Config{Log: &log})
	typ := reflect.TypeOf(client.CreateRequest{})
	for i := range typ.NumField() {
		f := typ.Field(i)
		name := jsonName(f)
		c, ok := cases[name]
		tc := tcp
		if !ok {
			t.Errorf("CreateRequest.%s (%q) has no grant decision in this test: decide whether a tenant may set it", f.Name, name)
			continue
		}
		if _, ok := createFields[name]; !ok {
			t.Errorf("CreateRequest.%s (%q) has no rule in createFields", f.Name, name)
		}
		var req client.CreateRequest
		reflect.ValueOf(&req).Elem().Field(i).Set(reflect.ValueOf(c.value))
		_, _, err := def.grantRequest(req)
		refused := err != nil
		var fe *fault.Error
		if refused && (!errors.As(err, &fe) || fe.Code != fault.NotGranted) {
			t.Errorf("%s %v: refused with %v, want PF189", name, c.value, err)
		}
		if want := c.decision != free; refused != want {
			t.Errorf("%s %v under the default policy: refused %v, want %v (%v)", name, c.value, refused, want, err)
		}
		if c.decision == never && (fe == nil || !strings.Contains(fe.What, "host paths")) {
			t.Errorf("%s: %v, want a refusal of host paths", name, err)
		}
		if c.decision != free {
			_, err := tc.Create(context.Background(), req)
			var ce *client.Error
			if !errors.As(err, &ce) || ce.Status != 403 || ce.Code != string(fault.NotGranted) {
				t.Errorf("%s %v over TCP: %v, want 403 PF189", name, c.value, err)
			}
		}
		if c.decision == granted {
			if fe != nil && !strings.Contains(fe.Fix, "policy file") {
				t.Errorf("%s: the fix %q does not name the policy", name, fe.Fix)
			}
			p := writePolicy(t, c.grant)
			if _, _, err := p.grantRequest(req); err != nil {
				t.Errorf("%s %v under %s: %v", name, c.value, c.grant, err)
			}
		}
	}
	if l := log.String(); !strings.Contains(l, `pinfold: tenant a refused: PF189 the server's policy does not grant base "dir:/"`) ||
		!strings.Contains(l, "cannot name host paths: mounts") {
		t.Errorf("the refusals were not logged: %q", l)
	}
	// A value of the host's environment by name is refused, a value the
	// tenant gives is its own.
	if _, _, err := def.grantRequest(client.CreateRequest{Env: []string{"A=1", "B=/x"}}); err != nil {
		t.Errorf("NAME=VALUE refused: %v", err)
	}
	// Defaults fill what a tenant leaves out: bounded and safe.
	got, _, err := def.grantRequest(client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := client.CreateRequest{Backend: "native", Network: "none", Base: "host", Memory: "2g", Pids: "1024", CPUs: "2",
		TmpSize: "1g", Timeout: "24h", IdleTimeout: "1h"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults: %+v, want %+v", got, want)
	}
	// A template's values are the sandbox's and are granted to the
	// requests that name it, not to others.
	p := writePolicy(t, `{"templates":{"net":{"network":"allow","allow":["example.org"],"env":["LANG","X=1"],"limits":{"memory":"1g"}}}}`)
	got, _, err = p.grantRequest(client.CreateRequest{Template: "net", Env: []string{"LANG"}})
	if err != nil || got.Network != "allow" || !reflect.DeepEqual(got.Allow, []string{"example.org"}) || got.Memory != "1g" ||
		!reflect.DeepEqual(got.Env, []string{"LANG", "X=1", "LANG"}) {
		t.Errorf("template: %+v %v", got, err)
	}
	if _, _, err := p.grantRequest(client.CreateRequest{Network: "allow"}); err == nil {
		t.Error("a template's network was granted to a request that does not name it")
	}
}

// tcpTenant serves cfg on TCP loopback with a tenant's token and returns
// that tenant's client.
func tcpTenant(t *testing.T, cfg Config) *client.Client {
	t.Helper()
	tok := "token-of-tenant-a-0123456789"
	cfg.Store, cfg.Tokens = t.TempDir(), map[string]string{tok: "a"}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Serve(ctx, New(cfg), l); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	c, err := client.New("http://"+l.Addr().String(), client.WithToken(tok))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writePolicy(t *testing.T, text string) *Policy {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := ReadPolicy(path)
	if err != nil {
		t.Fatalf("%s: %v", text, err)
	}
	return p
}

// TestReadPolicy: the policy file is read only when the operator owns it
// and nobody else can write it, and when every key and value of it is
// known and sound (fail closed).
func TestReadPolicy(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, text string
		mode       os.FileMode
		err        string
	}{
		{"good", `{"backends":["native"],"networks":["none","allow"],"bases":["host","debian-12","oci:/srv/img.tar:app","oci:registry.example.org/app:1"],
			"allow":["pypi.org"],"dns":["192.0.2.53"],"env":["LANG"],"host_ports":{"from":20000,"to":20999},
			"limits":{"memory":"4g","pids":512,"cpus":"1.5","tmp_size":"2g","timeout":"unlimited","idle_timeout":"30m"},
			"templates":{"py":{"base":"debian-12","network":"allow","allow":["pypi.org"],"limits":{"memory":"1g"}}}}`, 0o644, ""},
		{"group writable", `{}`, 0o664, "writable by others"},
		{"other writable", `{}`, 0o646, "writable by others"},
		{"unknown key", `{"bakends":["native"]}`, 0o600, "unknown field"},
		{"two values", `{} {}`, 0o600, "more than one"},
		{"host backend", `{"backends":["host"]}`, 0o600, "never the host"},
		{"no backend", `{"backends":[]}`, 0o600, "is empty"},
		{"bad network", `{"networks":["bridge"]}`, 0o600, "network"},
		{"relative base", `{"bases":["dir:rootfs"]}`, 0o600, "paths absolute"},
		{"relative oci", `{"bases":["oci:./x.tar"]}`, 0o600, "paths absolute"},
		{"bad env", `{"env":["A-B"]}`, 0o600, "env"},
		{"bad ports", `{"host_ports":{"from":30000,"to":20000}}`, 0o600, "host_ports"},
		{"bad limit", `{"limits":{"memory":"lots"}}`, 0o600, "memory"},
		{"zero limit", `{"limits":{"pids":0}}`, 0o600, "pids"},
		{"template over the limit", `{"limits":{"memory":"1g"},"templates":{"big":{"limits":{"memory":"2g"}}}}`, 0o600, "over the policy's limit"},
		{"bad template name", `{"templates":{"a/b":{}}}`, 0o600, "template"},
		{"template base", `{"templates":{"t":{"base":"tar:x.tar"}}}`, 0o600, "paths absolute"},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-"))
		os.WriteFile(p, []byte(c.text), c.mode)
		os.Chmod(p, c.mode)
		_, err := ReadPolicy(p)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.err)
		}
	}
	// Owned by another user: refused (this test runs as root or not).
	p := filepath.Join(dir, "theirs")
	os.WriteFile(p, []byte(`{}`), 0o644)
	if os.Getuid() == 0 {
		os.Chown(p, 1234, 1234)
		if _, err := ReadPolicy(p); err == nil || !strings.Contains(err.Error(), "not owned") {
			t.Errorf("another user's policy file: %v", err)
		}
	}
	if _, err := ReadPolicy(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing policy file was read")
	}
}

// TestTokenCompareFixedSize: every token comparison is of two values of
// one size, so that its time does not tell a token's length.
func TestTokenCompareFixedSize(t *testing.T) {
	var lens [][2]int
	old := tokenEqual
	tokenEqual = func(a, b []byte) int { lens = append(lens, [2]int{len(a), len(b)}); return old(a, b) }
	defer func() { tokenEqual = old }()
	s := &Server{cfg: Config{Tokens: map[string]string{"0123456789abcdef0123": "alice", "a-much-longer-token-of-bob-0123456789": "bob"}}}
	for _, h := range []string{"Bearer x", "Bearer 0123456789abcdef0123", "Bearer " + strings.Repeat("y", 300)} {
		s.token(h)
	}
	if len(lens) != 6 {
		t.Fatalf("%d comparisons, want 6 (every token, every time)", len(lens))
	}
	for _, l := range lens {
		if l[0] != 32 || l[1] != 32 {
			t.Errorf("compared %d and %d bytes, want two SHA-256 hashes", l[0], l[1])
		}
	}
	if tenant, ok := s.token("Bearer a-much-longer-token-of-bob-0123456789"); !ok || tenant != "bob" {
		t.Errorf("bob's token: %q %v", tenant, ok)
	}
}

// TestDeployPolicy: the policy of deploy/kubernetes/serve.yaml is one the
// server reads, and it grants the kubernetes runtime.
func TestDeployPolicy(t *testing.T) {
	b, err := os.ReadFile("../../deploy/kubernetes/serve.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "  policy.json: |\n")
	if !ok {
		t.Fatal("no policy.json in the manifest")
	}
	var text strings.Builder
	for _, l := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(l, "    ") {
			break
		}
		text.WriteString(l + "\n")
	}
	p := writePolicy(t, strings.ReplaceAll(text.String(), "oci:BASE", "oci:docker.io/local/busybox:1"))
	if got, _, err := p.grantRequest(client.CreateRequest{}); err != nil || got.Backend != "kubernetes" || got.Pids != "" {
		t.Errorf("the manifest's policy: %+v %v", got, err)
	}
}

// TestPlanCheck: a tenant's resolved plan holding anything of the host
// the grant does not cover is refused, whatever put it there.
func TestPlanCheck(t *testing.T) {
	ws := t.TempDir()
	pol := DefaultPolicy()
	req, g, err := pol.grantRequest(client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	resolve := func() *plan.Plan {
		sr := &session.StartRequest{Tenant: "t", Cwd: ws}
		f := &sr.Flags
		f.Workspace, f.Base, f.Backend, f.Network = ws, req.Base, req.Backend, req.Network
		f.Memory, f.Pids, f.CPUs, f.Timeout, f.TmpSize = req.Memory, req.Pids, req.CPUs, req.Timeout, req.TmpSize
		p, err := session.Resolve(context.Background(), engine.New(t.TempDir()), sr, "")
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if err := g.checkPlan(resolve()); err != nil {
		t.Fatalf("the default plan: %v", err)
	}
	for name, change := range map[string]func(p *plan.Plan){
		"mount": func(p *plan.Plan) {
			p.Sandbox.Mounts = append(p.Sandbox.Mounts, sandbox.Mount{Source: "/root", Target: "/r"})
		},
		"capture":        func(p *plan.Plan) { p.Captures = []string{"/etc"} },
		"hook":           func(p *plan.Plan) { p.Hooks = []plan.Hook{{Args: []string{"true"}}} },
		"secret":         func(p *plan.Plan) { p.Secrets = []plan.Secret{{Name: "s", Source: "/root/s"}} },
		"cache":          func(p *plan.Plan) { p.Caches = []plan.Cache{{Name: "c"}} },
		"capability":     func(p *plan.Plan) { p.Sandbox.Capabilities = []string{"net_raw"} },
		"host loopback":  func(p *plan.Plan) { p.Sandbox.Net.HostLoopback = true },
		"published port": func(p *plan.Plan) { p.Sandbox.Net.Publish = []string{"8080:80"} },
		"backend":        func(p *plan.Plan) { p.Backend = "docker" },
		"host mode":      func(p *plan.Plan) { p.Mode = "host" },
		"network":        func(p *plan.Plan) { p.Sandbox.Network = sandbox.NetworkHost },
		"allow":          func(p *plan.Plan) { p.Sandbox.Net.Allow = []string{"127.0.0.1"} },
		"dns":            func(p *plan.Plan) { p.Sandbox.Net.DNS = []string{"127.0.0.1:53"} },
		"host variable": func(p *plan.Plan) {
			p.Command.Env = append(p.Command.Env, plan.EnvVar{Name: "HOME", From: plan.FromHost + " (--env)"})
		},
		"no memory":  func(p *plan.Plan) { p.Sandbox.Limits.Memory = 0 },
		"more pids":  func(p *plan.Plan) { p.Sandbox.Limits.Pids = 1 << 20 },
		"no timeout": func(p *plan.Plan) { p.Timeout = 0 },
	} {
		p := resolve()
		change(p)
		var fe *fault.Error
		if err := g.checkPlan(p); !errors.As(err, &fe) || fe.Code != fault.NotGranted {
			t.Errorf("a plan with a %s: %v, want PF189", name, err)
		}
	}
	// No pinfold.yaml is read for a tenant's session, even in its workspace.
	os.WriteFile(filepath.Join(ws, "pinfold.yaml"), []byte("version: 1\npre_run: \"true\"\nnetwork: host\n"), 0o644)
	if p := resolve(); len(p.Hooks) != 0 || p.Sandbox.Network != sandbox.NetworkNone || p.Audit.Config != "" {
		t.Errorf("a tenant's plan read its workspace's pinfold.yaml: %+v %v %q", p.Hooks, p.Sandbox.Network, p.Audit.Config)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
