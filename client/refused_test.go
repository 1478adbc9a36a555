package client_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/pinfold/pinfold/client"
	"github.com/pinfold/pinfold/internal/server"
)

// TestRefusedPlanSameCode: a plan refused over the API gets the code
// pinfold session start and pinfold run give it: one classification
// (engine.Classify) serves every front end.
func TestRefusedPlanSameCode(t *testing.T) {
	ts := startServer(t, server.Config{})
	c := unixClient(t, ts)
	ws := t.TempDir()
	code := regexp.MustCompile(`PF[0-9]{3}`)
	cli := func(args ...string) string {
		cmd := exec.Command(filepath.Join(bin, "pinfold"), args...)
		cmd.Dir = ws
		cmd.Env = append(os.Environ(), "PINFOLD_STORE="+ts.store)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		cmd.Run()
		return code.FindString(errb.String())
	}
	for _, tc := range []struct {
		name  string
		req   client.CreateRequest
		flags []string
		want  string
		run   bool // pinfold run refuses it with the same code
	}{
		{"missing tar base", client.CreateRequest{Base: "tar:/nonexistent.tar"}, []string{"--base", "tar:/nonexistent.tar"}, "PF121", true},
		{"missing dir base", client.CreateRequest{Base: "dir:/nonexistent"}, []string{"--base", "dir:/nonexistent"}, "PF120", true},
		{"missing mount", client.CreateRequest{Mounts: []string{"/nonexistent:/x"}}, []string{"--mount", "/nonexistent:/x"}, "PF122", true},
		{"bad user", client.CreateRequest{User: "12345:1"}, []string{"--user", "12345:1"}, "PF102", true},
		{"host backend", client.CreateRequest{Backend: "host"}, []string{"--backend", "host"}, "PF174", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			req.Workspace = ws
			_, err := c.Create(context.Background(), req)
			var ce *client.Error
			if !errors.As(err, &ce) || ce.Code != tc.want {
				t.Fatalf("API: %v, want %s", err, tc.want)
			}
			if got := cli(append([]string{"session", "start"}, tc.flags...)...); got != tc.want {
				t.Errorf("pinfold session start: %s, want %s as over the API", got, tc.want)
			}
			if tc.run {
				if got := cli(append(append([]string{"run"}, tc.flags...), "--", "true")...); got != tc.want {
					t.Errorf("pinfold run: %s, want %s as over the API", got, tc.want)
				}
			}
		})
	}
}
