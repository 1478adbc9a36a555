package kubehelper

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAgentBinary checks which binary a cold session's pod gets: an
// executable pinfold-agent beside pinfold, else pinfold itself.
func TestAgentBinary(t *testing.T) {
	dir := t.TempDir()
	pinfold := filepath.Join(dir, "pinfold")
	os.WriteFile(pinfold, []byte("x"), 0o755)
	if got := agentBinary(pinfold); got != pinfold {
		t.Errorf("no pinfold-agent: got %s, want pinfold's binary %s", got, pinfold)
	}
	small := filepath.Join(dir, agentName)
	os.WriteFile(small, []byte("x"), 0o644)
	if got := agentBinary(pinfold); got != pinfold {
		t.Errorf("a pinfold-agent that is not executable: got %s, want %s", got, pinfold)
	}
	os.Chmod(small, 0o755)
	if got := agentBinary(pinfold); got != small {
		t.Errorf("got %s, want %s beside pinfold", got, small)
	}
}

// TestAwaitFile runs awaitFile's shell for real: the command starts only
// once the file exists, and gets its arguments whole.
func TestAwaitFile(t *testing.T) {
	done := filepath.Join(t.TempDir(), "ready")
	args := awaitFile(done, []string{"printf", "%s|", "a b", "$0"})
	cmd := exec.Command(args[0], args[1:]...)
	var out strings.Builder
	cmd.Stdout = &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if out.Len() > 0 {
		t.Fatalf("ran before the file was there: %q", out.String())
	}
	os.WriteFile(done, nil, 0o444)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if out.String() != "a b|$0|" {
		t.Errorf("output %q, want %q", out.String(), "a b|$0|")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s", d)
	}
}
