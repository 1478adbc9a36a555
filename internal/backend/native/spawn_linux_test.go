package native

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// children lists this process's child pids (its threads' children files).
func children(t *testing.T) []string {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, task := range tasks {
		b, _ := os.ReadFile("/proc/self/task/" + task.Name() + "/children")
		pids = append(pids, strings.Fields(string(b))...)
	}
	return pids
}

// TestSpawnDoesNotWait: Spawn returns while the init makes the namespaces
// (the caller prepares the config meanwhile). A spawned init closed
// before it is configured, or one whose spawn failed (reported by the
// call after Configure, which does not wait), leaves no process:
// Close first learns stage 2's pid, which would otherwise outlive stage 1.
func TestSpawnDoesNotWait(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for the id maps")
	}
	sc := SpawnConfig{
		Namespaces: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWNET,
		UIDMap:     "0 1879048192 65536\n", GIDMap: "0 1879048192 65536\n", InitID: &ID{0, 0},
	}
	for i := 0; i < 20; i++ {
		in, err := Spawn(&sc)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 && in.Pid() <= 0 { // half of them with stage 2 known first
			t.Fatal("no pid for the sandbox's PID 1")
		}
		in.Close()
	}
	if c := children(t); len(c) > 0 {
		t.Errorf("closed inits left processes: %v", c)
	}

	bad := sc
	bad.Namespaces |= syscall.CLONE_THREAD // clone refuses it without CLONE_SIGHAND
	in, err := Spawn(&bad)
	if err != nil {
		t.Fatal(err)
	}
	err = in.Configure(&Config{SpawnConfig: bad, Scratch: "/tmp"})
	if err == nil {
		err = in.Ready()
	}
	if err == nil || !strings.Contains(err.Error(), "creating namespaces") {
		t.Errorf("a spawn that failed was made ready: %v", err)
	}
	in.Close()
	if c := children(t); len(c) > 0 {
		t.Errorf("a failed spawn left processes: %v", c)
	}
}

// TestDiscardDoesNotWait: an init nobody configures is discarded without
// waiting for its report (a stopped one would never send it), and leaves
// no process once reaped in the background.
func TestDiscardDoesNotWait(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for the id maps")
	}
	sc := SpawnConfig{
		Namespaces: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET,
		UIDMap:     "0 1879048192 65536\n", GIDMap: "0 1879048192 65536\n", InitID: &ID{0, 0},
	}
	for i := 0; i < 10; i++ {
		in, err := Spawn(&sc)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			syscall.Kill(in.stage1, syscall.SIGSTOP)
		}
		done := make(chan struct{})
		go func() { in.discard(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("discard waited for the init")
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(children(t)) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if c := children(t); len(c) > 0 {
		var st []string
		for _, p := range c {
			b, _ := os.ReadFile("/proc/" + p + "/stat")
			st = append(st, string(b))
		}
		t.Errorf("discarded inits left processes: %v", st)
	}
}
