package netstack

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/internal/netpolicy"
)

// The test binary is the helper too, when run as one: netpolicy starts
// it by its HelperName, as "serve SOCK" for the shared one, and the
// shared helper re-executes itself with the same arguments.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == netpolicy.HelperName {
		os.Exit(Main())
	}
	os.Exit(m.Run())
}

// anonKiB is pid's anonymous memory, in KiB (Pss_Anon of its
// smaps_rollup: what a helper's Go runtime holds).
func anonKiB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Pss_Anon:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Skip("no Pss_Anon in smaps_rollup (kernel before 5.13)")
	return 0
}

// sharedHelperPid finds the shared helper serving sock.
func sharedHelperPid(sock string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if bytes.HasSuffix(cmd, []byte("\x00serve\x00"+sock+"\x00")) {
			return pid
		}
	}
	return 0
}

// A burst of sandboxes grows the shared helper's Go runtime (the heap's
// metadata, goroutine and thread stacks) by more than a collection gives
// back; once idle for ReleaseAfter the helper starts afresh, with the
// anonymous memory of a helper that served nothing, and goes on serving
// on the same socket, with the same pid.
func TestReleaseAfterBurstStartsAfresh(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for two releases")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PINFOLD_NET_HELPER", exe)
	t.Setenv("PINFOLD_NET_SHARED", "")
	store, err := os.MkdirTemp("", "pfnet")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(store) })
	cfg := netpolicy.Config{Mode: netpolicy.Outbound, HostLoopback: true}

	// The first launch starts the shared helper and serves itself.
	first, err := netpolicy.Launch(cfg, store)
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	// launch connects one stack to the shared helper and serves a
	// device with it.
	launch := func() (*realSandbox, *netpolicy.Stack) {
		t.Helper()
		rs, tun := newRealDevice(t)
		s, err := netpolicy.Launch(cfg, store)
		if err != nil {
			tun.Close()
			t.Fatal(err)
		}
		if _, _, ok := s.Shared(); !ok {
			s.Close()
			tun.Close()
			t.Fatal("the stack was not served by the shared helper")
		}
		if err := s.Attach(tun); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Ready(ctx); err != nil {
			s.Close()
			t.Fatal(err)
		}
		return rs, s
	}
	var sock string
	var pid int
	for end := time.Now().Add(10 * time.Second); pid == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the shared helper did not start")
		}
		if s := sharedOrNil(t, cfg, store); s != nil {
			sock, _, _ = s.Shared()
			pid = sharedHelperPid(sock)
			s.Close()
		}
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	// released waits until the helper, idle, has started afresh (its
	// image's environment names another exit time than prev's), and
	// returns its anonymous memory then.
	released := func(what, prev string) (int, string) {
		t.Helper()
		deadline := time.Now().Add(ReleaseAfter + 20*time.Second)
		for {
			time.Sleep(100 * time.Millisecond)
			if syscall.Kill(pid, 0) != nil {
				t.Fatalf("%s: the helper %d is gone", what, pid)
			}
			env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
			for _, e := range bytes.Split(env, []byte{0}) {
				if v, ok := bytes.CutPrefix(e, []byte(resumeEnv+"=")); ok && string(v) != prev {
					time.Sleep(500 * time.Millisecond) // the new image's start and release
					return anonKiB(t, pid), string(v)
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the helper did not start afresh within %v", what, ReleaseAfter+20*time.Second)
			}
		}
	}
	base, image := released("before the burst", "")

	// The burst: 10 sandboxes at once, each downloading 4 MiB from the
	// host and holding its connection until all have.
	const boxes, size = 10, 4 << 20
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		data := make([]byte, size)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				c.Write(data)
				io.Copy(io.Discard, c) // until the sandbox closes
				c.Close()
			}()
		}
	}()
	addr := netip.AddrPortFrom(netpolicy.HostAddr, uint16(l.Addr().(*net.TCPAddr).Port)).String()
	var conns []net.Conn
	var stacks []*netpolicy.Stack
	for range boxes {
		rs, s := launch()
		stacks = append(stacks, s)
		rs.inside(t, func() (err error) {
			c, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err == nil {
				conns = append(conns, c)
			}
			return err
		})
	}
	var wg sync.WaitGroup
	errs := make(chan error, boxes)
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetDeadline(time.Now().Add(60 * time.Second))
			if n, err := io.ReadFull(c, make([]byte, size)); err != nil {
				errs <- fmt.Errorf("a sandbox read %d bytes of %d: %w", n, size, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	busy := anonKiB(t, pid)
	for _, c := range conns {
		c.Close()
	}
	for _, s := range stacks {
		s.Close()
	}
	after, _ := released("after the burst", image)
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == "exe" {
		t.Errorf("the helper started afresh is named %q", comm)
	}
	t.Logf("the helper's anonymous memory: %d KiB released before the burst, %d KiB with %d sandboxes, %d KiB released after", base, busy, boxes, after)
	if busy < base+1024 {
		t.Logf("the burst added only %d KiB: it tests little", busy-base)
	}
	if after > base+512 {
		t.Errorf("released after a burst of %d sandboxes the helper holds %d KiB of anonymous memory, %d KiB before it", boxes, after, base)
	}
	// The new image serves on the same socket.
	rs, s := launch()
	defer s.Close()
	rs.inside(t, func() error {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			return fmt.Errorf("after the release: %w", err)
		}
		defer c.Close()
		_, err = io.ReadFull(c, make([]byte, 1<<20))
		return err
	})
	if p := sharedHelperPid(sock); p != pid {
		t.Errorf("the helper serving %s is %d, was %d", sock, p, pid)
	}
}

// sharedOrNil connects to the shared helper if it runs (nil if not yet).
func sharedOrNil(t *testing.T, cfg netpolicy.Config, store string) *netpolicy.Stack {
	t.Helper()
	s, err := netpolicy.Launch(cfg, store)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := s.Shared(); !ok {
		s.Close()
		return nil
	}
	return s
}

// A new image takes over only a listening socket, and takes the variable
// from its environment, so that nothing it starts inherits it.
func TestResumedTakesOnlyAListeningSocket(t *testing.T) {
	f, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	at := time.Now().Add(IdleExit).Truncate(time.Microsecond)
	for _, v := range []string{fmt.Sprintf("%d:%d", f.Fd(), at.UnixNano()), "x:1", "7", ""} {
		t.Setenv(resumeEnv, v)
		if _, _, ok := resumed(); ok {
			t.Errorf("%s=%q taken", resumeEnv, v)
		}
	}
	lfd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(lfd)
	if err := unix.Bind(lfd, &unix.SockaddrUnix{Name: filepath.Join(t.TempDir(), "s")}); err != nil {
		t.Fatal(err)
	}
	// Bound, not listening: not a helper's socket either.
	t.Setenv(resumeEnv, fmt.Sprintf("%d:%d", lfd, at.UnixNano()))
	if _, _, ok := resumed(); ok {
		t.Error("a socket that does not listen taken")
	}
	if err := unix.Listen(lfd, 8); err != nil {
		t.Fatal(err)
	}
	t.Setenv(resumeEnv, fmt.Sprintf("%d:%d", lfd, at.UnixNano()))
	fd, exitAt, ok := resumed()
	if !ok || fd != lfd || !exitAt.Equal(at) {
		t.Fatalf("resumed() = %d, %v, %v; want %d, %v, true", fd, exitAt, ok, lfd, at)
	}
	if _, set := os.LookupEnv(resumeEnv); set {
		t.Error("the variable stays in the environment")
	}
	if fl, err := unix.FcntlInt(uintptr(lfd), unix.F_GETFD, 0); err != nil || fl&unix.FD_CLOEXEC == 0 {
		t.Errorf("the socket's descriptor flags %#x (%v): not close-on-exec", fl, err)
	}
}
