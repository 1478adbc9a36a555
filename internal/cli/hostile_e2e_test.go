package cli_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
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

	"golang.org/x/sys/unix"
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
	return pfWithinEnv(t, d, dir, nil, args...)
}

// pfWithinEnv is pfWithin with variables added to the environment.
func pfWithinEnv(t *testing.T, d time.Duration, dir string, env []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, pinfold, args...)
	if len(args) > 1 && args[0] == "session" && (args[1] == "ls" || args[1] == "status" || args[1] == "stop") {
		cmd = exec.CommandContext(ctx, boundedMemory(pinfold)[0], append(boundedMemory(pinfold)[1:], args...)...)
	}
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
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

// boundedMemory is the command line running exe with at most 1 GiB of
// address space, where prlimit is installed: a host that reads a device
// planted as a file (/dev/zero) without a bound fails instead of taking
// the machine's memory.
func boundedMemory(exe string) []string {
	if p, err := exec.LookPath("prlimit"); err == nil {
		return []string{p, "--as=1073741824", "--", exe}
	}
	return []string{exe}
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
		{name: "exit marker is a device", host: func(run string) error {
			return syscall.Mknod(filepath.Join(run, "exit"), syscall.S_IFCHR|0o666, int(unix.Mkdev(1, 5))) // /dev/zero: endless
		}, ops: []string{"lost"}},
		{name: "exit marker is huge", inside: huge, ops: []string{"lost"}},
		{name: "exit marker says something else", inside: `printf 'stopped\n\033[2J%s' "$(cat /etc/hostname)" > /.pinfold/run/exit`, ops: []string{"lost"}},
		{name: "agent socket links to a host socket", inside: "ln -sf " + h.sock + " /.pinfold/run/agent.sock", ops: []string{"stop", "lost"}},
		{name: "links to the outside in the run directory and home", inside: "ln -s " + h.dir + " /.pinfold/run/d; ln -s " + h.file + " /.pinfold/run/f; ln -s " + h.dir + ` "$HOME/d"; ln -s ` + h.file + ` "$HOME/f"; mkdir -p "$HOME/x"; ln -s ` + h.dir + ` "$HOME/x/y"`, ops: []string{"stop", "lost"}},
	} {
		for _, op := range c.ops {
			t.Run(c.name+"/"+op, func(t *testing.T) {
				// A store of its own: a session left blocking one case's
				// listing would block the next's.
				store, err := os.MkdirTemp("", "pf-hostile-") // short: socket paths
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.RemoveAll(store) })
				t.Setenv("PINFOLD_STORE", store)
				h.dials.Store(0)
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
				// Through the CLI, then through the HTTP API (pinfold serve).
				sock := filepath.Join(store, "api.sock")
				srvArgs := append(boundedMemory(pinfold), "serve", "--socket", sock)
				srv := exec.Command(srvArgs[0], srvArgs[1:]...)
				srv.Dir = ws
				var srvLog bytes.Buffer
				srv.Stdout, srv.Stderr = &srvLog, &srvLog
				if err := srv.Start(); err != nil {
					t.Fatal(err)
				}
				defer func() { srv.Process.Kill(); srv.Wait() }()
				waitServer(t, sock)
				for _, env := range [][]string{nil, {"PINFOLD_HOST=unix://" + sock}} {
					for _, args := range [][]string{{"session", "ls", "--all"}, {"session", "ls", "--all", "--json"}, {"session", "status", "--json", r.ID}} {
						out, errs, code := pfWithinEnv(t, 60*time.Second, ws, env, args...)
						if code != 0 || !strings.Contains(out, r.ID) {
							t.Errorf("%v pinfold %s: %d %q %q", env, strings.Join(args, " "), code, clip(out), clip(errs))
						}
						outs = append(outs, out, errs)
					}
				}
				outs = append(outs, srvLog.String())
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

// holdsSecret tells whether the file at path, or any gzip-compressed
// blob or tar entry in it, holds secret.
func holdsSecret(t *testing.T, path, secret string) bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	return blobHolds(b, secret, 0)
}

func blobHolds(b []byte, secret string, depth int) bool {
	if bytes.Contains(b, []byte(secret)) {
		return true
	}
	if depth > 3 {
		return false
	}
	if len(b) > 2 && b[0] == 0x1f && b[1] == 0x8b {
		if z, err := gzip.NewReader(bytes.NewReader(b)); err == nil {
			if u, err := io.ReadAll(io.LimitReader(z, 256<<20)); err == nil && blobHolds(u, secret, depth+1) {
				return true
			}
		}
	}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err != nil {
			return false
		}
		if h.Typeflag == tar.TypeReg {
			c, _ := io.ReadAll(io.LimitReader(tr, 256<<20))
			if blobHolds(c, secret, depth+1) {
				return true
			}
		}
	}
}

// treeHolds tells whether a regular file below dir holds secret (links
// are not followed: they are content).
func treeHolds(dir, secret string) []string {
	var found []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(secret)) {
				found = append(found, p)
			}
		}
		return nil
	})
	return found
}

// TestHostNeverFollowsChangesetLinks: links a command creates in its
// workspace or a captured directory are the changeset's content. Every
// host operation on that changeset (diff, export, a session's snapshot,
// its restore into another session, apply, and pack of the workspace
// they were applied to) handles them as links: none reads, writes,
// chmods or deletes what they point to, and none shows the secret.
func TestHostNeverFollowsChangesetLinks(t *testing.T) {
	f := newPackFixture(t)
	t.Setenv("PINFOLD_STORE", f.store)
	t.Cleanup(func() { waitTrashCleaners(f.store) })
	h := newHostile(t)
	ws := f.ws
	capture := filepath.Join(packableDir(t), "captured")
	os.MkdirAll(capture, 0o755)
	plantIn := func(dir string) string {
		return fmt.Sprintf("cd %s && ln -s %s leak && ln -s %s dirleak && mkdir -p d/e && ln -s %s d/e/leak2 && "+
			"ln -s %s/canary d/canary && ln -s %s/sub d/sub && ln -s ../../../../../../../../..%s d/dotdot && echo real > real.txt",
			dir, h.file, h.dir, h.file, h.dir, h.dir, h.file)
	}
	var outs []string
	run := func(args ...string) (string, string) {
		t.Helper()
		out, errs, code := pfWithin(t, 120*time.Second, ws, args...)
		if code != 0 {
			t.Errorf("pinfold %s: %d %s", strings.Join(args, " "), code, errs)
		}
		outs = append(outs, out, errs)
		h.check(t, strings.Join(args, " "), out, errs)
		return out, errs
	}
	isLinkTo := func(p, target string) {
		t.Helper()
		if got, err := os.Readlink(p); err != nil || got != target {
			t.Errorf("%s: a link to %q was wanted, found %q (%v)", p, target, got, err)
		}
	}

	// The probe finds the secret in a compressed archive (a control: a
	// probe that could not tell would pass anything).
	ctl := filepath.Join(t.TempDir(), "ctl.tar.gz")
	mustRun(t, "", "tar", "-czf", ctl, "-C", h.outside, "secret")
	if !holdsSecret(t, ctl, h.secret) {
		t.Fatal("holdsSecret misses the secret in a tar.gz")
	}

	// A live session: its upper directory is written while the host reads.
	r := startBounded(t, ws)
	if _, errs, code := pfWithin(t, 60*time.Second, ws, "exec", r.ID, "--", "sh", "-c", plantIn(".")); code != 0 {
		t.Fatalf("planting: %d %s", code, errs)
	}
	run("diff", r.Changeset)
	run("diff", r.Changeset, "--stat")
	run("changes", "--all", "--json")
	snap, _ := run("session", "snapshot", r.ID)
	snap = strings.TrimSpace(snap)
	layer := filepath.Join(t.TempDir(), "layer.tar")
	run("export", r.Changeset, "-o", layer)
	for _, p := range []string{layer, filepath.Join(f.store, "snapshots", snap, "layer.tar")} {
		if holdsSecret(t, p, h.secret) {
			t.Errorf("%s holds the secret", p)
		}
	}
	run("session", "stop", "--time", "2", r.ID)

	// The snapshot restored into another session.
	r2 := startBounded(t, ws, "--snapshot", snap)
	out, _ := run("exec", r2.ID, "--", "sh", "-c", "readlink leak d/e/leak2; cat leak d/e/leak2 dirleak/canary 2>/dev/null; true")
	if !strings.Contains(out, h.file) {
		t.Errorf("the restored session lacks the links: %q", out)
	}
	run("session", "stop", "--time", "2", r2.ID)
	run("discard", r2.Changeset)

	// Applied: the links land as links.
	run("apply", r.Changeset)
	isLinkTo(filepath.Join(ws, "leak"), h.file)
	isLinkTo(filepath.Join(ws, "dirleak"), h.dir)
	isLinkTo(filepath.Join(ws, "d", "sub"), filepath.Join(h.dir, "sub"))
	if found := treeHolds(ws, h.secret); len(found) > 0 {
		t.Errorf("the workspace holds the secret after apply: %v", found)
	}

	// A captured directory keeps its links the same way.
	_, errs, code := pfWithin(t, 120*time.Second, ws, "run", "--capture", capture, "--", "sh", "-c", plantIn(capture))
	if code != 0 {
		t.Fatalf("run --capture: %d %s", code, errs)
	}
	id, _, _, _ := summary(t, errs)
	run("diff", id)
	clayer := filepath.Join(t.TempDir(), "captured.tar")
	run("export", id, "-o", clayer)
	if holdsSecret(t, clayer, h.secret) {
		t.Errorf("the captured changeset's export holds the secret")
	}
	run("apply", id)
	isLinkTo(filepath.Join(capture, "leak"), h.file)
	isLinkTo(filepath.Join(capture, "d", "canary"), filepath.Join(h.dir, "canary"))
	if found := treeHolds(capture, h.secret); len(found) > 0 {
		t.Errorf("the captured directory holds the secret after apply: %v", found)
	}

	// Packed: the workspace's links are links in the image.
	mustRun(t, ws, "git", "add", "-A")
	mustRun(t, ws, "git", "-c", "user.email=t@example.org", "-c", "user.name=t", "commit", "-qm", "links")
	img := filepath.Join(f.dir, "img.tar")
	run("pack", "image", "--base", "tar:"+f.base, "--out", img)
	if holdsSecret(t, img, h.secret) {
		t.Errorf("the packed image holds the secret")
	}
	for _, o := range outs {
		if strings.Contains(o, h.secret) {
			t.Fatalf("the secret was shown")
		}
	}
}
