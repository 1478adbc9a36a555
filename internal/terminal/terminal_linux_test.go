package terminal

import (
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}

// TestRawAndSize: Raw turns off line editing and echo and restores
// them; Size reads the window, and a window change is relayed as a
// resize with the new size.
func TestRawAndSize(t *testing.T) {
	_, pts := openPTY(t)
	if !Is(pts) {
		t.Fatal("a pts is not a terminal")
	}
	if r, err := os.CreateTemp(t.TempDir(), "f"); err == nil {
		if Is(r) || Raw(r) != nil {
			t.Error("a file is taken for a terminal")
		}
		r.Close()
	}
	restore := Raw(pts)
	if restore == nil {
		t.Fatal("Raw failed on a pts")
	}
	tio, _ := unix.IoctlGetTermios(int(pts.Fd()), unix.TCGETS)
	if tio.Lflag&(unix.ICANON|unix.ECHO|unix.ISIG) != 0 {
		t.Errorf("raw mode keeps line editing: lflag %#x", tio.Lflag)
	}
	restore()
	tio, _ = unix.IoctlGetTermios(int(pts.Fd()), unix.TCGETS)
	if tio.Lflag&(unix.ICANON|unix.ECHO) == 0 {
		t.Errorf("not restored: lflag %#x", tio.Lflag)
	}
	if err := unix.IoctlSetWinsize(int(pts.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 33, Col: 101}); err != nil {
		t.Fatal(err)
	}
	if rows, cols, ok := Size(pts); !ok || rows != 33 || cols != 101 {
		t.Errorf("size %d %d %v", rows, cols, ok)
	}
	f := Catch(true, pts)
	defer f.Stop()
	sized := make(chan [2]uint16, 1)
	go f.Relay(nil, func(syscall.Signal) {}, func(rows, cols uint16) { sized <- [2]uint16{rows, cols} })
	syscall.Kill(os.Getpid(), syscall.SIGWINCH)
	select {
	case s := <-sized:
		if s != [2]uint16{33, 101} {
			t.Errorf("resized to %v", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no resize on SIGWINCH")
	}
}
