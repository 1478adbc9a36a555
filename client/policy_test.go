package client_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/pinfold/pinfold/client"
	"github.com/pinfold/pinfold/internal/server"
)

// TestApplyPolicyChange: a sandbox's changeset that writes pinfold.yaml is
// not applied over the API without policy=true (403, PF186), and a
// tenant's never is; the owner's, with it, is.
func TestApplyPolicyChange(t *testing.T) {
	tok := "token-of-tenant-a-0123456789"
	ts := startServer(t, server.Config{Tokens: map[string]string{tok: "a"}})
	ctx := context.Background()
	write := "printf 'version: 1\\npre_run: [touch /tmp/x]\\n' > pinfold.yaml; echo x > other.txt"
	refused := func(err error) bool {
		var ce *client.Error
		return errors.As(err, &ce) && ce.Status == 403 && ce.Code == "PF186"
	}
	stopped := func(c *client.Client, req client.CreateRequest) string {
		s, err := c.Create(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := c.Exec(ctx, s.ID, client.ExecRequest{Args: []string{"sh", "-c", write}}); err != nil || res.ExitCode != 0 {
			t.Fatalf("%+v %v", res, err)
		}
		if _, err := c.Delete(ctx, s.ID); err != nil {
			t.Fatal(err)
		}
		return s.ID
	}

	a, _ := client.New(ts.tcp, client.WithToken(tok))
	id := stopped(a, client.CreateRequest{})
	if err := a.Apply(ctx, id, false); !refused(err) {
		t.Errorf("a tenant's apply: %v", err)
	}
	if err := a.ApplyPolicy(ctx, id, true); !refused(err) {
		t.Errorf("a tenant's apply with policy=true: %v", err)
	}
	// The operator's policy may let tenants accept them.
	pol := server.DefaultPolicy()
	pol.ApplyPolicy = true
	ts2 := startServer(t, server.Config{Tokens: map[string]string{tok: "a"}, Policy: pol})
	a2, _ := client.New(ts2.tcp, client.WithToken(tok))
	id2 := stopped(a2, client.CreateRequest{})
	if err := a2.Apply(ctx, id2, false); !refused(err) {
		t.Errorf("a tenant's apply without policy=true, apply_policy granted: %v", err)
	}
	if err := a2.ApplyPolicy(ctx, id2, false); err != nil {
		t.Errorf("a tenant's apply with policy=true, apply_policy granted: %v", err)
	}

	owner := unixClient(t, ts)
	ws := t.TempDir()
	id = stopped(owner, client.CreateRequest{Workspace: ws})
	if err := owner.Apply(ctx, id, false); !refused(err) {
		t.Errorf("the owner's apply without policy=true: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "pinfold.yaml")); err == nil {
		t.Fatal("a refused apply wrote pinfold.yaml")
	}
	if err := owner.ApplyPolicy(ctx, id, false); err != nil {
		t.Errorf("the owner's apply with policy=true: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "pinfold.yaml")); err != nil || len(b) == 0 {
		t.Errorf("pinfold.yaml not applied: %v", err)
	}
}
