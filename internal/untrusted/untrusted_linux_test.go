package untrusted

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// plant makes a tree a sandbox could have written, beside an outside
// directory holding a secret and a socket.
func plant(t *testing.T) (tree, outside string) {
	t.Helper()
	dir := t.TempDir()
	tree, outside = filepath.Join(dir, "tree"), filepath.Join(dir, "outside")
	os.MkdirAll(filepath.Join(tree, "d"), 0o755)
	os.MkdirAll(outside, 0o755)
	os.WriteFile(filepath.Join(outside, "secret"), []byte("SECRET"), 0o600)
	os.WriteFile(filepath.Join(tree, "d", "ok"), []byte("ok"), 0o644)
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(tree, "link"))
	os.Symlink(outside, filepath.Join(tree, "dirlink"))
	syscall.Mkfifo(filepath.Join(tree, "fifo"), 0o644)
	os.WriteFile(filepath.Join(tree, "big"), make([]byte, 4096), 0o644)
	return tree, outside
}

// within fails t if f blocks (a FIFO opened without O_NONBLOCK).
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s blocked", what)
	}
}

func TestReadSmall(t *testing.T) {
	tree, _ := plant(t)
	for name, want := range map[string]error{"link": ErrLink, "fifo": ErrNotFile, "d": ErrNotFile, "big": ErrTooLarge, "dirlink": ErrLink} {
		within(t, name, func() {
			b, err := ReadSmall(filepath.Join(tree, name), 64)
			if !errors.Is(err, want) || strings.Contains(string(b), "SECRET") {
				t.Errorf("%s: %q %v, want %v", name, b, err, want)
			}
		})
	}
	if b, err := ReadSmall(filepath.Join(tree, "d", "ok"), 64); err != nil || string(b) != "ok" {
		t.Errorf("a small file: %q %v", b, err)
	}
}

func TestOpenFileBeneath(t *testing.T) {
	tree, _ := plant(t)
	for _, rel := range []string{"link", "dirlink/secret", "fifo", "d", "../outside/secret", "d/../../outside/secret"} {
		within(t, rel, func() {
			if f, err := OpenFileBeneath(tree, rel); err == nil {
				f.Close()
				t.Errorf("%s opened", rel)
			}
		})
	}
	f, err := OpenFileBeneath(tree, "d/ok")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func TestDialUnixRefusesLinks(t *testing.T) {
	tree, outside := plant(t)
	sock := filepath.Join(outside, "host.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	os.Symlink(sock, filepath.Join(tree, "agent.sock"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, name := range []string{"agent.sock", "d/ok", "fifo"} {
		if c, err := DialUnix(ctx, filepath.Join(tree, name)); err == nil {
			c.Close()
			t.Errorf("%s dialled", name)
		}
	}
	c, err := DialUnix(ctx, sock)
	if err != nil {
		t.Fatalf("the socket itself: %v", err)
	}
	c.Close()
}
