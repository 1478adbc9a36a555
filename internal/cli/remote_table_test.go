package cli

import (
	"slices"
	"testing"

	"github.com/pinfold/pinfold/internal/remote"
)

// TestRemoteKnowsEveryCommand holds pinfold's command line on macOS and
// Windows (internal/remote) to this table: every command and alias is
// either one a server runs (session's, exec, shell) or version, or one
// refused as needing a Linux host; none is an unknown command there, and
// remote names none that pinfold lacks.
func TestRemoteKnowsEveryCommand(t *testing.T) {
	served := []string{"session", "exec", "shell", "version"}
	seen := map[string]bool{"completion": true}
	for _, c := range commands() {
		for _, n := range append([]string{c.name}, c.aliases...) {
			seen[n] = true
			if !slices.Contains(served, n) && !slices.Contains(remote.LinuxOnly, n) {
				t.Errorf("pinfold %s: neither run through PINFOLD_HOST nor in remote.LinuxOnly", n)
			}
		}
		if c.name != "session" {
			continue
		}
		for _, s := range c.sub {
			for _, n := range append([]string{s.name}, s.aliases...) {
				if !slices.Contains(remote.SessionCommands, n) && !slices.Contains(remote.SessionLocal, n) {
					t.Errorf("pinfold session %s: neither in remote.SessionCommands nor remote.SessionLocal", n)
				}
			}
		}
	}
	for _, n := range remote.LinuxOnly {
		if !seen[n] {
			t.Errorf("remote.LinuxOnly names %s, which pinfold has not", n)
		}
	}
}
