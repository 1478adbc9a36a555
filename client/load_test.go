package client_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinfold/pinfold/client"
	"github.com/pinfold/pinfold/internal/conformance"
	"github.com/pinfold/pinfold/internal/procstat"
	"github.com/pinfold/pinfold/internal/server"
)

// TestExecUnderLoad runs many execs at once through the API over TCP with
// a token, into one native session, beside two busy processes per core:
// every one must come back with exactly its own output on both streams
// and its exit status. Output lost under load (the exit status reported
// before the output was copied) fails it.
func TestExecUnderLoad(t *testing.T) {
	total, parallel := 1000, 50
	if testing.Short() {
		total = 150
	}
	tok := "token-of-the-load-tenant-0123"
	ts := startServer(t, server.Config{Tokens: map[string]string{tok: "load"}, Tenants: t.TempDir()})
	c, err := client.New(ts.tcp, client.WithToken(tok))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb, err := c.Create(ctx, client.CreateRequest{Name: "load"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Delete(ctx, sb.ID)
	// Two busy processes per core on the host, so that the agent, the
	// server and the commands wait for the processor.
	var busy []*exec.Cmd
	defer func() {
		for _, b := range busy {
			b.Process.Kill()
			b.Wait()
		}
	}()
	for range 2 * runtime.NumCPU() {
		b := exec.Command("sh", "-c", "while :; do :; done")
		if err := b.Start(); err != nil {
			t.Fatal(err)
		}
		busy = append(busy, b)
	}
	// And as many in the session, beside the commands and the agent
	// (they end with the session).
	for range 2 * runtime.NumCPU() {
		res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Args: []string{"sh", "-c", "nohup sh -c 'while :; do :; done' >/dev/null 2>&1 &"}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("starting a busy process in the session: %+v %v", res, err)
		}
	}
	var (
		next, failed atomic.Int64
		mu           sync.Mutex
		examples     []string
		wg           sync.WaitGroup
	)
	start := time.Now()
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= total {
					return
				}
				status := 1 + i%100
				cmd := fmt.Sprintf("echo out-%d; echo err-%d >&2; exit %d", i, i, status)
				rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				res, err := c.Exec(rctx, sb.ID, client.ExecRequest{Args: []string{"sh", "-c", cmd}})
				cancel()
				if err == nil && res.ExitCode == status && res.Stdout == fmt.Sprintf("out-%d\n", i) &&
					res.Stderr == fmt.Sprintf("err-%d\n", i) && !res.Truncated && res.Error == "" {
					continue
				}
				failed.Add(1)
				mu.Lock()
				if len(examples) < 5 {
					examples = append(examples, fmt.Sprintf("exec %d: %+v %v", i, res, err))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d execs (%d at once) came back wrong, for example:\n%s", n, total, parallel, strings.Join(examples, "\n"))
	}
	t.Logf("%d execs, %d at once, in %s", total, parallel, time.Since(start).Round(time.Millisecond))
}

// TestExecBackgroundOutput: a process the command leaves running with its
// output open does not hold the exec: what the command wrote comes back
// with its status, and truncated says the rest was not waited for. One
// that let go of the output cuts nothing.
func TestExecBackgroundOutput(t *testing.T) {
	ts := startServer(t, server.Config{})
	c := unixClient(t, ts)
	ctx := context.Background()
	sb, err := c.Create(ctx, client.CreateRequest{Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cmd       string
		truncated bool
	}{
		{"echo hi; echo err >&2; sleep 4343 & exit 5", true},
		{"echo hi; echo err >&2; sleep 4344 >/dev/null 2>&1 & exit 5", false},
		{"echo hi; echo err >&2; (sleep 0.05; echo late) & exit 5", false},
	} {
		start := time.Now()
		res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Args: []string{"sh", "-c", tc.cmd}})
		took := time.Since(start)
		// What a process left running writes soon after is waited for;
		// on a machine too slow for that, truncated must say it is missing.
		want, late := "hi\n", strings.Contains(tc.cmd, "late")
		if late && (res == nil || !res.Truncated) {
			want = "hi\nlate\n"
		}
		if err != nil || res.ExitCode != 5 || res.Stdout != want || res.Stderr != "err\n" || !late && res.Truncated != tc.truncated {
			t.Errorf("%q: %+v %v", tc.cmd, res, err)
		}
		if took > 5*time.Second {
			t.Errorf("%q took %s", tc.cmd, took)
		}
		var out bytes.Buffer
		e, err := c.Stream(ctx, sb.ID, client.StreamRequest{Args: []string{"sh", "-c", tc.cmd}}, nil, &out, io.Discard)
		if want = "hi\n"; late && (e == nil || !e.Truncated) {
			want = "hi\nlate\n"
		}
		if err != nil || e.Code != 5 || out.String() != want || !late && e.Truncated != tc.truncated {
			t.Errorf("streamed %q: %+v %v %q", tc.cmd, e, err, out.String())
		}
	}
	// A terminal too: the shell ignores SIGHUP so that its background
	// process keeps the terminal open after the shell ended.
	var out bytes.Buffer
	e, err := c.Stream(ctx, sb.ID, client.StreamRequest{Args: []string{"sh", "-c", "trap '' HUP; echo hi; sleep 4345 & exit 5"}, TTY: true}, nil, &out, nil)
	if err != nil || e.Code != 5 || !strings.Contains(out.String(), "hi") || !e.Truncated {
		t.Errorf("terminal: %+v %v %q", e, err, out.String())
	}
}

// TestNoZombies: the sessions' supervisors that pinfold serve started are
// reaped when they end; none is left a zombie under the server.
func TestNoZombies(t *testing.T) {
	store := t.TempDir()
	sock := filepath.Join(store, "api.sock")
	srv := exec.Command(filepath.Join(bin, "pinfold-api"), "serve", "--max-conns", "8")
	srv.Env = append(os.Environ(), "PINFOLD_STORE="+store)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	waitFor(t, func() bool {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	c, _ := client.New("unix://" + sock)
	ctx := context.Background()
	for i := range 3 {
		sb, err := c.Create(ctx, client.CreateRequest{Workspace: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		if res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Args: []string{"echo", fmt.Sprint(i)}}); err != nil || res.Stdout != fmt.Sprintf("%d\n", i) {
			t.Errorf("exec: %+v %v", res, err)
		}
		// A live session leaves no zombie either: not under its
		// supervisor (or the waiter it became), nor anywhere below.
		var live []string
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			live = nil
			for _, pid := range procstat.Descendants(srv.Process.Pid)[1:] {
				live = append(live, zombieChildren(pid)...)
			}
			if len(live) == 0 {
				break
			}
		}
		if len(live) != 0 {
			t.Errorf("zombies under a live session: %v", live)
		}
		if _, err := c.Delete(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	var zombies []string
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if zombies = zombieChildren(srv.Process.Pid); len(zombies) == 0 {
			return
		}
	}
	t.Errorf("zombies under the server (pid %d): %v", srv.Process.Pid, zombies)
}

// zombieChildren lists the children of pid that are zombies (pid and name).
func zombieChildren(pid int) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) >= 2 && f[0] == "Z" && f[1] == fmt.Sprint(pid) {
			out = append(out, s[:i+1])
		}
	}
	return out
}

// TestExecClientGone: a client that goes away during POST .../exec hangs
// its command up (as a streamed exec's does); nothing is held for it.
func TestExecClientGone(t *testing.T) {
	ts := startServer(t, server.Config{})
	c := unixClient(t, ts)
	ctx := context.Background()
	sb, err := c.Create(ctx, client.CreateRequest{Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	gone, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(gone, sb.ID, client.ExecRequest{Args: []string{"sh", "-c", "exec sleep 4747"}})
		done <- err
	}()
	waitFor(t, func() bool { return len(conformance.ProcessesWith("sleep 4747")) > 0 })
	cancel()
	<-done
	waitFor(t, func() bool { return len(conformance.ProcessesWith("sleep 4747")) == 0 })
}

// TestLongExecsWithShortLimits: the API's deadlines bound reading and
// writing, not the commands: execs, waited for or streamed, outlast them.
func TestLongExecsWithShortLimits(t *testing.T) {
	tok := "token-of-the-long-tenant-0123"
	lim := server.Bounds{HeaderTimeout: time.Second, BodyTimeout: time.Second, WriteTimeout: time.Second, IdleTimeout: time.Second}
	ts := startServerLimited(t, server.Config{Tokens: map[string]string{tok: "long"}, Tenants: t.TempDir()}, lim)
	c, err := client.New(ts.tcp, client.WithToken(tok))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Delete(ctx, sb.ID)
	cmd := []string{"sh", "-c", "sleep 2.5; echo done"}
	if res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Args: cmd}); err != nil || res.Stdout != "done\n" {
		t.Errorf("exec: %+v %v", res, err)
	}
	var out bytes.Buffer
	if e, err := c.Stream(ctx, sb.ID, client.StreamRequest{Args: cmd}, strings.NewReader("in"), &out, nil); err != nil || e.Code != 0 || out.String() != "done\n" {
		t.Errorf("stream: %+v %v %q", e, err, out.String())
	}
}

// blockedWriter never returns from Write until it is released: a client
// that stops reading.
type blockedWriter struct{ release chan struct{} }

func (b blockedWriter) Write(p []byte) (int, error) {
	<-b.release
	return len(p), nil
}

// TestStreamReaderStops: a streamed exec whose client stops reading is
// dropped after the write timeout, and its command hung up.
func TestStreamReaderStops(t *testing.T) {
	ts := startServerLimited(t, server.Config{}, server.Bounds{WriteTimeout: time.Second})
	c := unixClient(t, ts)
	ctx := context.Background()
	sb, err := c.Create(ctx, client.CreateRequest{Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	bw := blockedWriter{release: make(chan struct{})}
	defer close(bw.release)
	p, err := c.Start(ctx, sb.ID, client.StreamRequest{Args: []string{"sh", "-c", "exec yes slow-reader-4848"}}, nil, bw, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	waitFor(t, func() bool { return len(conformance.ProcessesWith("yes slow-reader-4848")) > 0 })
	waitFor(t, func() bool { return len(conformance.ProcessesWith("yes slow-reader-4848")) == 0 })
}
