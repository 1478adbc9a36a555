package procstat

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestStartTime(t *testing.T) {
	self := StartTime(os.Getpid())
	if self == 0 {
		t.Fatal("no start time for this process")
	}
	cmd := exec.Command("sleep", "0.01")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	child := StartTime(cmd.Process.Pid)
	cmd.Wait()
	if child < self {
		t.Errorf("a child started at %d, before its parent (%d)", child, self)
	}
	if got := StartTime(cmd.Process.Pid); got != 0 {
		t.Errorf("a reaped process still has a start time: %d", got)
	}
}

func TestZombieIsGone(t *testing.T) {
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	if StartTime(cmd.Process.Pid) == 0 {
		t.Fatal("no start time for a running child")
	}
	if z := Zombies(os.Getpid()); len(z) != 0 {
		t.Errorf("zombies before the kill: %v", z)
	}
	cmd.Process.Kill()
	// Not reaped yet: a zombie until Wait.
	for i := 0; i < 500 && StartTime(cmd.Process.Pid) != 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if got := StartTime(cmd.Process.Pid); got != 0 {
		t.Errorf("a zombie has a start time: %d", got)
	}
	if z := Zombies(os.Getpid()); len(z) != 1 || !strings.HasPrefix(z[0], strconv.Itoa(cmd.Process.Pid)+" (sleep)") {
		t.Errorf("zombies: %v", z)
	}
}

func TestIdle(t *testing.T) {
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	Idle(cmd.Process.Pid)
	b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// Field 19 is the nice value (fields counted after the comm's ")").
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	if f[16] != "19" {
		t.Errorf("nice %s, want 19", f[16])
	}
}
