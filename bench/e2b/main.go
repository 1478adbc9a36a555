// Command e2b measures pinfold serve's E2B protocol through E2B's own SDK
// (e2b@2.51.0, run by node): rounds of create → commands.run('true') →
// kill, p50 and p99, against the same through pinfold's own API (the Go
// client: create, exec, delete) and, where a docker daemon answers,
// `docker run --rm IMAGE true`; the blocks alternate, so the ratios come
// from one run on one load. Then the host memory of an idle E2B sandbox.
//
//	./scripts/build.sh && go run ./bench/e2b -pinfold bin/pinfold
//
// It needs root (sessions as a server runs them) and the SDK where
// scripts/test-setup.sh installs it (-sdk).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pinfold/pinfold/client"
	"github.com/pinfold/pinfold/internal/procstat"
	"github.com/pinfold/pinfold/internal/server"
	"github.com/pinfold/pinfold/internal/session"
)

const token = "token-of-the-bench-tenant-0123456789"

func main() {
	pinfold := flag.String("pinfold", "./bin/pinfold", "pinfold binary (sessions' supervisor)")
	sdk := flag.String("sdk", "/var/cache/pinfold-tools/e2b-node", "directory e2b@2.51.0 is installed in")
	script := flag.String("script", "client/testdata/e2b/sdk.mjs", "the SDK script")
	rounds := flag.Int("rounds", 100, "rounds of each")
	block := flag.Int("block", 10, "rounds per alternating block")
	image := flag.String("image", "debian:12-slim", "docker's image")
	idle := flag.Int("idle", 10, "idle E2B sandboxes for the memory figure")
	flag.Parse()
	bin, err := filepath.Abs(*pinfold)
	check(err)
	scr, err := filepath.Abs(*script)
	check(err)
	tmp, err := os.MkdirTemp("", "pinfold-bench-e2b-")
	check(err)
	defer os.RemoveAll(tmp)
	store := filepath.Join(tmp, "store")
	check(os.Setenv("PINFOLD_STORE", store))
	pol := filepath.Join(tmp, "policy.json")
	check(os.WriteFile(pol, []byte(`{"templates": {"base": {}}}`), 0o600))
	p, err := server.ReadPolicy(pol)
	check(err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	url := "http://" + l.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	srv := server.New(server.Config{Store: store, Pinfold: bin, Tokens: map[string]string{token: "bench"}, Policy: p})
	go server.Serve(ctx, srv, l)
	defer cancel()
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("load average at the start: %s", load)

	sdkRounds := func(n int) []time.Duration {
		cmd := exec.Command("node", scr, "bench", strconv.Itoa(n))
		cmd.Env = append(os.Environ(), "E2B_API_URL="+url, "E2B_SANDBOX_URL="+url, "E2B_API_KEY="+token, "E2B_NODE_DIR="+*sdk, "E2B_DEBUG=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			fail("the SDK: %v\n%s", err, out)
		}
		_, after, _ := strings.Cut(string(out), "bench ")
		var ds []time.Duration
		for _, f := range strings.Fields(after) {
			v, _ := strconv.ParseFloat(f, 64)
			ds = append(ds, time.Duration(v*float64(time.Millisecond)))
		}
		return ds
	}
	c, err := client.New(url, client.WithToken(token))
	check(err)
	apiRound := func() time.Duration {
		t0 := time.Now()
		sb, err := c.Create(ctx, client.CreateRequest{Template: "base"})
		check(err)
		res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Args: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			fail("exec: %v %+v", err, res)
		}
		_, err = c.Delete(ctx, sb.ID)
		check(err)
		return time.Since(t0)
	}
	docker := exec.Command("docker", "image", "inspect", *image).Run() == nil
	if !docker {
		fmt.Printf("docker run: skipped (no daemon, or no image %s: docker pull it)\n", *image)
	}
	sdkRounds(2) // warm
	apiRound()
	var e2b, api, dock []time.Duration
	for done := 0; done < *rounds; done += *block {
		n := min(*block, *rounds-done)
		e2b = append(e2b, sdkRounds(n)...)
		for i := 0; i < n; i++ {
			api = append(api, apiRound())
		}
		for i := 0; docker && i < n; i++ {
			t0 := time.Now()
			check(exec.Command("docker", "run", "--rm", *image, "true").Run())
			dock = append(dock, time.Since(t0))
		}
	}
	fmt.Printf("\ncreate → run true → kill, %d rounds each, in alternating blocks of %d\n", *rounds, *block)
	fmt.Printf("  %-58s %9s %9s\n", "", "p50", "p99")
	row := func(name string, d []time.Duration) {
		fmt.Printf("  %-58s %7.1fms %7.1fms\n", name, ms(pct(d, 50)), ms(pct(d, 99)))
	}
	row("E2B SDK (Sandbox.create, commands.run, kill)", e2b)
	row("pinfold's API (client.Create, Exec, Delete)", api)
	fmt.Printf("  E2B SDK / pinfold's API: p50 %.2f, p99 %.2f\n", ms(pct(e2b, 50))/ms(pct(api, 50)), ms(pct(e2b, 99))/ms(pct(api, 99)))
	if docker {
		row("docker run --rm "+*image+" true", dock)
		fmt.Printf("  E2B SDK / docker run: p50 %.2f, p99 %.2f\n", ms(pct(e2b, 50))/ms(pct(dock, 50)), ms(pct(e2b, 99))/ms(pct(dock, 99)))
	}
	memory(url, store, *idle)
	load, _ = os.ReadFile("/proc/loadavg")
	fmt.Printf("\nload average at the end: %s", load)
}

// memory creates n E2B sandboxes as the SDK does and reports the host
// memory (PSS) of each, idle: its supervisor and its sandbox's processes.
func memory(url, store string, n int) {
	var ids []string
	defer func() {
		for _, id := range ids {
			req, _ := http.NewRequest("DELETE", url+"/sandboxes/"+id, nil)
			req.Header.Set("X-API-KEY", token)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}()
	for i := 0; i < n; i++ {
		req, _ := http.NewRequest("POST", url+"/v2/sandboxes", bytes.NewReader([]byte(`{"templateID":"base","timeout":600}`)))
		req.Header.Set("X-API-KEY", token)
		resp, err := http.DefaultClient.Do(req)
		check(err)
		var out struct{ SandboxID string }
		json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if out.SandboxID == "" {
			fail("create: %s", resp.Status)
		}
		ids = append(ids, out.SandboxID)
	}
	time.Sleep(2 * time.Second)
	st := session.Open(store)
	var total, anon int64
	for _, id := range ids {
		r, err := st.Get(id, "bench")
		check(err)
		for _, p := range procstat.Descendants(r.Pid) {
			m, _ := procstat.MemoryOf(p)
			t, a := m.Pss, m.PssAnon
			total, anon = total+t, anon+a
		}
	}
	fmt.Printf("\nhost memory per idle E2B sandbox (%d, PSS from /proc/PID/smaps_rollup): %.2f MiB, of which its own (anonymous) %.2f MiB\n",
		n, float64(total)/float64(n)/1024, float64(anon)/float64(n)/1024)
}

func pct(d []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := len(s) * p / 100
	if i >= len(s) {
		i = len(s) - 1
	}
	return s[i]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func check(err error) {
	if err != nil {
		fail("%v", err)
	}
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "e2b bench: "+format+"\n", a...)
	os.Exit(1)
}
