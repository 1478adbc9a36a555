package cli_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// What the host reads from a sandbox (docs/security.md): everything a
// sandbox can write is planted with links to a root-only secret and to a
// host directory, FIFOs and oversized files, and every host operation
// that touches it must neither show the secret, nor block, nor read,
// write, chmod or delete anything outside.

// hostile is what the sandbox must never reach: a secret file only its
// owner reads and a host directory with a file, and a unix socket the
// host listens on, all outside any sandbox.
type hostile struct {
	secret  string // its content
	file    string // the secret file
	dir     string // a host directory
	sock    string // a host socket that counts its connections
	dials   atomic.Int32
	outside string // the directory holding them
	before  string
}

func newHostile(t *testing.T) *hostile {
	t.Helper()
	var b [8]byte
	rand.Read(b[:])
	h := &hostile{secret: "PINFOLD-SECRET-" + hex.EncodeToString(b[:]), outside: t.TempDir()}
	h.file = filepath.Join(h.outside, "secret")
	h.dir = filepath.Join(h.outside, "hostdir")
	h.sock = filepath.Join(h.outside, "host.sock")
	if err := os.WriteFile(h.file, []byte(h.secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(h.dir, "sub"), 0o755)
	os.WriteFile(filepath.Join(h.dir, "canary"), []byte("canary\n"), 0o644)
	os.WriteFile(filepath.Join(h.dir, "sub", "deep"), []byte("deep\n"), 0o640)
	l, err := net.Listen("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			h.dials.Add(1)
			c.Close()
		}
	}()
	h.before = h.state(t)
	return h
}

// state describes everything outside: names, types, modes, owners,
// sizes, times and contents.
func (h *hostile) state(t *testing.T) string {
	var b strings.Builder
	filepath.WalkDir(h.outside, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", p, err)
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		st := fi.Sys().(*syscall.Stat_t)
		fmt.Fprintf(&b, "%s %v %d:%d %d %d", p, fi.Mode(), st.Uid, st.Gid, fi.Size(), fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() {
			c, _ := os.ReadFile(p)
			fmt.Fprintf(&b, " %q", c)
		}
		b.WriteByte('\n')
		return nil
	})
	return b.String()
}

// check fails t if what the host printed or stored holds the secret, or
// if anything outside changed or the host socket was dialled.
func (h *hostile) check(t *testing.T, what string, outputs ...string) {
	t.Helper()
	for _, o := range outputs {
		if strings.Contains(o, h.secret) {
			t.Errorf("%s: the secret reached the host's output: %q", what, clip(o))
		}
	}
	if now := h.state(t); now != h.before {
		t.Errorf("%s: the outside changed:\nbefore:\n%s\nafter:\n%s", what, h.before, now)
	}
	if n := h.dials.Load(); n != 0 {
		t.Errorf("%s: the host connected to a socket outside %d times", what, n)
	}
}

func clip(s string) string {
	if len(s) > 2000 {
		return s[:2000] + "..."
	}
	return s
}

// pfWithin is pf with a deadline: a host that blocks (on a FIFO planted
// where it expects a file) fails the test instead of hanging it.
func pfWithin(t *testing.T, d time.Duration, dir string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, pinfold, args...)
	cmd.Dir = dir
	cmd.WaitDelay = 2 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Errorf("pinfold %s blocked for %s", strings.Join(args, " "), d)
		return out.String(), errb.String(), -1
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running pinfold: %v", err)
	}
	return out.String(), errb.String(), code
}

// startBounded is startSession whose stop at the end cannot hang the test.
func startBounded(t *testing.T, ws string, args ...string) sessionRecord {
	t.Helper()
	out, errs, code := pfWithin(t, 60*time.Second, ws, append([]string{"session", "start", "--json"}, args...)...)
	var r sessionRecord
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.State != "running" || r.Pid == 0 {
		t.Fatalf("session start: %d %q %s", code, out, errs)
	}
	t.Cleanup(func() {
		syscall.Kill(r.Pid, syscall.SIGKILL)
		pfWithin(t, 60*time.Second, ws, "session", "stop", "--time", "1", r.ID)
	})
	return r
}

// reasons a session's end may be recorded with: a sandbox picks none of
// its own.
var knownReason = regexp.MustCompile(`^(stopped|idle|timeout|its supervisor died|killed|(exited|signaled) -?\d+|limit hit: [a-z, ]+)?$`)

// TestHostNeverFollowsTheRunDirectory: the session's run directory and
// home are the sandbox's to write; what the host does there when a
// session stops or is found lost (its exit marker, its socket, its
// removal) follows no link, opens no FIFO, reads no more than a marker's
// few bytes and takes no reason the agent could not have written.
func TestHostNeverFollowsTheRunDirectory(t *testing.T) {
	store := t.TempDir()
	t.Setenv("PINFOLD_STORE", store)
	ws := t.TempDir()
	h := newHostile(t)
	huge := "head -c 67108864 /dev/zero | tr '\\0' x > /.pinfold/run/exit"
	for _, c := range []struct {
		name   string
		inside string                 // run in the session
		host   func(run string) error // or done on the host, in its run directory
		ops    []string               // stop: pinfold session stop; lost: its supervisor killed, then session ls
	}{
		{name: "exit marker links to a secret", inside: "ln -sf " + h.file + " /.pinfold/run/exit", ops: []string{"stop", "lost"}},
		{name: "exit marker links to a host directory", inside: "ln -sf " + h.dir + " /.pinfold/run/exit", ops: []string{"stop", "lost"}},
		{name: "exit marker is a FIFO", host: func(run string) error { return syscall.Mkfifo(filepath.Join(run, "exit"), 0o666) }, ops: []string{"stop", "lost"}},
		{name: "exit marker is huge", inside: huge, ops: []string{"lost"}},
		{name: "exit marker says something else", inside: `printf 'stopped\n\033[2J%s' "$(cat /etc/hostname)" > /.pinfold/run/exit`, ops: []string{"lost"}},
		{name: "agent socket links to a host socket", inside: "ln -sf " + h.sock + " /.pinfold/run/agent.sock", ops: []string{"stop", "lost"}},
		{name: "links to the outside in the run directory and home", inside: "ln -s " + h.dir + " /.pinfold/run/d; ln -s " + h.file + " /.pinfold/run/f; ln -s " + h.dir + ` "$HOME/d"; ln -s ` + h.file + ` "$HOME/f"; mkdir -p "$HOME/x"; ln -s ` + h.dir + ` "$HOME/x/y"`, ops: []string{"stop", "lost"}},
	} {
		for _, op := range c.ops {
			t.Run(c.name+"/"+op, func(t *testing.T) {
				r := startBounded(t, ws)
				if c.inside != "" {
					if _, errs, code := pfWithin(t, 30*time.Second, ws, "exec", r.ID, "--", "sh", "-c", c.inside); code != 0 {
						t.Fatalf("planting: %d %s", code, errs)
					}
				}
				if c.host != nil {
					if err := c.host(filepath.Join(store, "sessions", r.ID, "run")); err != nil {
						t.Fatal(err)
					}
				}
				var outs []string
				switch op {
				case "stop":
					out, errs, code := pfWithin(t, 60*time.Second, ws, "session", "stop", "--time", "2", r.ID)
					if code != 0 {
						t.Errorf("session stop: %d %s", code, errs)
					}
					outs = append(outs, out, errs)
				case "lost":
					syscall.Kill(r.Pid, syscall.SIGKILL)
					deadline := time.Now().Add(10 * time.Second)
					for syscall.Kill(r.Pid, 0) == nil && time.Now().Before(deadline) {
						time.Sleep(20 * time.Millisecond)
					}
				}
				for _, args := range [][]string{{"session", "ls", "--all"}, {"session", "ls", "--all", "--json"}, {"session", "status", "--json", r.ID}} {
					out, errs, _ := pfWithin(t, 60*time.Second, ws, args...)
					outs = append(outs, out, errs)
				}
				var st sessionRecord
				out, _, _ := pfWithin(t, 60*time.Second, ws, "session", "status", "--json", r.ID)
				json.Unmarshal([]byte(out), &st)
				if st.State == "running" || !knownReason.MatchString(st.Reason) {
					t.Errorf("after %s: state %q, reason %q", op, st.State, clip(st.Reason))
				}
				rec, _ := os.ReadFile(filepath.Join(store, "sessions", r.ID, "session.json"))
				log, _ := os.ReadFile(filepath.Join(store, "sessions", r.ID, "log"))
				outs = append(outs, string(rec), string(log))
				if len(rec) > 64<<10 {
					t.Errorf("the session's record holds %d bytes", len(rec))
				}
				h.check(t, c.name+", "+op, outs...)
			})
		}
	}
}
