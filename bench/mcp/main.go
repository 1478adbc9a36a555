// Command mcp measures an MCP tool call: session_exec of `true` through a
// running `pinfold mcp` (the Go SDK's client on its stdin and stdout, as
// an agent's client holds it) against `pinfold exec SESSION -- true`, a
// whole process, into the same session, in paired rounds (the order
// alternates). It prints each one's p50 and p99 and the median of the
// per-round ratios.
//
//	./scripts/build.sh && go run ./bench/mcp -pinfold bin/pinfold
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	pinfold := flag.String("pinfold", "./bin/pinfold", "pinfold binary to measure")
	rounds := flag.Int("rounds", 200, "paired rounds")
	flag.Parse()
	bin, err := filepath.Abs(*pinfold)
	check(err)
	tmp, err := os.MkdirTemp("", "pinfold-bench-mcp-")
	check(err)
	defer os.RemoveAll(tmp)
	store, ws := filepath.Join(tmp, "store"), filepath.Join(tmp, "ws")
	check(os.MkdirAll(ws, 0o755))
	check(os.Setenv("PINFOLD_STORE", store))
	check(os.Chdir(ws))
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("load average at the start: %s", load)

	ctx := context.Background()
	c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: exec.Command(bin, "mcp")}, nil)
	check(err)
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "session_start", Arguments: map[string]any{"name": "bench"}})
	check(err)
	if res.IsError {
		fail("session_start: %v", res.Content)
	}
	id := res.StructuredContent.(map[string]any)["id"].(string)
	// The session outlives this program: stopped at its end, failed or not.
	cleanup = func() {
		cs.CallTool(ctx, &mcp.CallToolParams{Name: "session_stop", Arguments: map[string]any{"session": id}})
		cs.Close()
		os.RemoveAll(tmp)
	}
	defer cleanup()

	tool := func() time.Duration {
		t0 := time.Now()
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "session_exec", Arguments: map[string]any{"session": id, "command": []string{"true"}}})
		d := time.Since(t0)
		if err != nil || r.IsError {
			fail("session_exec: %v %v", err, r)
		}
		return d
	}
	cli := func() time.Duration {
		t0 := time.Now()
		if out, err := exec.Command(bin, "exec", id, "--", "true").CombinedOutput(); err != nil {
			fail("pinfold exec: %v %s", err, out)
		}
		return time.Since(t0)
	}
	for range 10 { // warm both
		tool()
		cli()
	}
	var a, b, ratios []float64
	for i := range *rounds {
		var ta, tb time.Duration
		if i%2 == 0 {
			ta, tb = tool(), cli()
		} else {
			tb, ta = cli(), tool()
		}
		a, b = append(a, ms(ta)), append(b, ms(tb))
		ratios = append(ratios, float64(ta)/float64(tb))
	}
	load, _ = os.ReadFile("/proc/loadavg")
	fmt.Printf("MCP tools/call session_exec true (stdio): p50 %.2f ms, p99 %.2f ms\n", pct(a, 50), pct(a, 99))
	fmt.Printf("pinfold exec SESSION -- true:             p50 %.2f ms, p99 %.2f ms\n", pct(b, 50), pct(b, 99))
	fmt.Printf("ratio MCP / pinfold exec: median %.3f (p25 %.3f, p75 %.3f), %d rounds\n", pct(ratios, 50), pct(ratios, 25), pct(ratios, 75), *rounds)
	fmt.Printf("load average at the end: %s", load)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pct is the p-th percentile (nearest rank) of xs.
func pct(xs []float64, p int) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := (len(s)*p + 99) / 100
	return s[max(min(i, len(s))-1, 0)]
}

func check(err error) {
	if err != nil {
		fail("%v", err)
	}
}

var cleanup = func() {}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench/mcp: "+format+"\n", a...)
	cleanup()
	os.Exit(1)
}
