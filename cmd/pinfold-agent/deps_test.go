package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAgentAlone: pinfold-agent is copied into every cold session's pod,
// so it links the agent and what the agent needs, not pinfold's engine,
// CLI or runtimes (which would bring it back to pinfold's size).
func TestAgentAlone(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/pinfold/pinfold/cmd/pinfold-agent").Output()
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"agent": true, "helper": true, "untrusted": true}
	var agent bool
	for _, p := range strings.Fields(string(out)) {
		rest, ok := strings.CutPrefix(p, "github.com/pinfold/pinfold/")
		if !ok || rest == "cmd/pinfold-agent" || rest == "sandbox" {
			continue
		}
		name, isInternal := strings.CutPrefix(rest, "internal/")
		agent = agent || name == "agent"
		if !isInternal || !allowed[name] {
			t.Errorf("pinfold-agent links %s", p)
		}
	}
	if !agent {
		t.Error("pinfold-agent does not link internal/agent")
	}
}
