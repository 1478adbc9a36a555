package native_test

import (
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/pinfold/pinfold/internal/conformance"
	"github.com/pinfold/pinfold/internal/nettest"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/native"
)

var agentOnce struct {
	sync.Once
	path string
	err  error
}

// agentBinary builds pinfold, whose agent sessions run.
func agentBinary(t *testing.T) string {
	agentOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pinfold-agent-")
		if err != nil {
			agentOnce.err = err
			return
		}
		os.Chmod(dir, 0o755)
		agentOnce.path, agentOnce.err = nettest.BuildPinfold(dir)
	})
	if agentOnce.err != nil {
		t.Fatal(agentOnce.err)
	}
	return agentOnce.path
}

func TestSession(t *testing.T) {
	rt := native.NewRuntime(native.WithAgent(agentBinary(t)))
	var s sandbox.Sessioner = rt // native has sessions
	st := conformance.SessionTarget{Sessioner: s, Spec: baseSpec(t)}
	if _, err := exec.LookPath("python3"); err == nil {
		st.Python = true
		st.ServeHTTP = "cd /tmp && (python3 -m http.server --bind 127.0.0.1 8766 >/dev/null 2>&1 &); " +
			"for i in $(seq 100); do python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8766))' 2>/dev/null && break; sleep 0.05; done"
	}
	conformance.Session(t, st)
}

// A program that is not pinfold, with no pinfold installed, is told what
// a session lacks and how to give it, not a mount error.
func TestSessionWithoutPinfold(t *testing.T) {
	t.Setenv("PINFOLD_AGENT", "")
	t.Setenv("PATH", "/usr/bin:/bin")
	if _, err := exec.LookPath("pinfold"); err == nil {
		t.Skip("pinfold is on /usr/bin:/bin")
	}
	s, err := native.NewSession(t.Context(), sandbox.Spec{Workspace: t.TempDir()})
	if err == nil {
		s.Close()
		t.Fatal("a session started without pinfold's binary")
	}
	if msg := err.Error(); strings.HasPrefix(msg, "mount:") || !strings.Contains(msg, "PINFOLD_AGENT") || !strings.Contains(msg, "install pinfold") {
		t.Errorf("error: %v", err)
	}
}
