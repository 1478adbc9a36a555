package client_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"syscall"

	"github.com/pinfold/pinfold/client"
)

// A sandbox that stays up: commands share its files, the changeset is
// reviewed and applied at the end.
func Example() {
	ctx := context.Background()
	c, err := client.New("unix:///var/lib/pinfold/api.sock")
	if err != nil {
		log.Fatal(err)
	}
	sb, err := c.Create(ctx, client.CreateRequest{Workspace: "/src/app", Network: "allow", Allow: []string{"pypi.org", "files.pythonhosted.org"}})
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Args: []string{"pip", "install", "--user", "-r", "requirements.txt"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout)
	res, _ = c.Exec(ctx, sb.ID, client.ExecRequest{Args: []string{"python3", "-m", "pytest", "-q"}})
	fmt.Println("tests exited with", res.ExitCode)
	diff, _ := c.Diff(ctx, sb.ID, "stat")
	fmt.Print(diff)
	c.Delete(ctx, sb.ID) // stop it; the changeset stays
	if res.ExitCode == 0 {
		c.Apply(ctx, sb.ID, false)
	}
}

// Over TCP, a tenant's token; the tenant's sandboxes get workspaces of
// their own.
func ExampleNew_tcp() {
	c, err := client.New("http://127.0.0.1:7700", client.WithToken(os.Getenv("PINFOLD_TOKEN")))
	if err != nil {
		log.Fatal(err)
	}
	h, err := c.Health(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(h.Status, h.Sandboxes, "running")
}

// Live output, stdin and signals over the WebSocket.
func ExampleClient_Start() {
	ctx := context.Background()
	c, _ := client.New("unix:///var/lib/pinfold/api.sock")
	p, err := c.Start(ctx, "my-sandbox", client.StreamRequest{Args: []string{"python3", "-u", "train.py"}},
		strings.NewReader("go\n"), os.Stdout, os.Stderr)
	if err != nil {
		log.Fatal(err)
	}
	// ... later, if it takes too long:
	p.Signal(syscall.SIGINT)
	exit, err := p.Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("exit status", exit.Code)
}

// An interactive shell on a terminal of the caller's size.
func ExampleClient_Stream() {
	ctx := context.Background()
	c, _ := client.New("unix:///var/lib/pinfold/api.sock")
	exit, err := c.Stream(ctx, "my-sandbox", client.StreamRequest{Args: []string{"bash", "-l"}, TTY: true, Rows: 40, Cols: 120},
		os.Stdin, os.Stdout, nil)
	if err != nil {
		log.Fatal(err)
	}
	os.Exit(exit.Code)
}

// Files in and out, and a port of the sandbox on the host.
func ExampleClient_WriteFile() {
	ctx := context.Background()
	c, _ := client.New("unix:///var/lib/pinfold/api.sock")
	if err := c.WriteFile(ctx, "my-sandbox", "/tmp/config.json", 0o600, strings.NewReader(`{"debug": true}`)); err != nil {
		log.Fatal(err)
	}
	c.Exec(ctx, "my-sandbox", client.ExecRequest{Args: []string{"sh", "-c", "app --config /tmp/config.json > /tmp/out.txt"}})
	if err := c.ReadFile(ctx, "my-sandbox", "/tmp/out.txt", os.Stdout); err != nil {
		log.Fatal(err)
	}
	p, _ := c.Publish(ctx, "my-sandbox", 8000, 0)
	fmt.Println("the app is on http://" + p.Host)
}

// Save a sandbox's writes and start a new sandbox from them.
func ExampleClient_Snapshot() {
	ctx := context.Background()
	c, _ := client.New("unix:///var/lib/pinfold/api.sock")
	snap, err := c.Snapshot(ctx, "my-sandbox")
	if err != nil {
		log.Fatal(err)
	}
	sb, err := c.Create(ctx, client.CreateRequest{Workspace: snap.Workspace, Snapshot: snap.ID})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("restored into", sb.ID)
}
