// Package client is the Go client of pinfold's HTTP API (pinfold serve):
// sandboxes that stay up, commands run in them with their output
// streamed, their files, their changeset and their ports.
//
//	c, err := client.New("unix:///var/lib/pinfold/api.sock")
//	sb, err := c.Create(ctx, client.CreateRequest{Workspace: "/src/app"})
//	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Args: []string{"make", "test"}})
//	fmt.Print(res.Stdout)
//	c.Delete(ctx, sb.ID)
//
// Over TCP, give the tenant's token: client.New("http://host:7700",
// client.WithToken(tok)). Errors from the server are *Error values with a
// stable PF code (docs/errors.md) and the HTTP status.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client talks to one pinfold server.
type Client struct {
	base  string // http://host[:port] (a placeholder host for unix sockets)
	token string
	hc    *http.Client
}

// Option configures a Client.
type Option func(*Client)

// WithToken authenticates every request with a bearer token (TCP).
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient uses hc's settings (timeouts...); its transport is kept
// for TCP and replaced for unix sockets.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { cp := *hc; c.hc = &cp }
}

// New returns a client of the server at addr: "unix:///path/to/api.sock",
// a socket path, or "http://host:port".
func New(addr string, opts ...Option) (*Client, error) {
	c := &Client{hc: &http.Client{}}
	for _, o := range opts {
		o(c)
	}
	switch {
	case strings.HasPrefix(addr, "unix://") || strings.HasPrefix(addr, "/"):
		path := strings.TrimPrefix(addr, "unix://")
		tr := &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", path)
			},
			MaxIdleConnsPerHost: 64,
		}
		c.hc.Transport = tr
		c.base = "http://pinfold"
	case strings.HasPrefix(addr, "http://") || strings.HasPrefix(addr, "https://"):
		c.base = strings.TrimSuffix(addr, "/")
		if c.hc.Transport == nil {
			c.hc.Transport = &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}
		}
	default:
		return nil, fmt.Errorf("client: address %q is neither unix:///PATH nor http://HOST:PORT", addr)
	}
	return c, nil
}

// Error is a request the server refused or failed.
type Error struct {
	Status  int    // HTTP status
	Code    string `json:"code"` // PF code
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s %s (HTTP %d)", e.Code, e.Message, e.Status)
	if e.Fix != "" {
		s += "; fix: " + e.Fix
	}
	return s
}

// IsNotFound reports whether err is a 404: no such sandbox (or another
// tenant's), file or changeset.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}

func (c *Client) request(ctx context.Context, method, path string, q url.Values, body io.Reader, ctype string) (*http.Response, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		var wrapped struct {
			Error Error `json:"error"`
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if json.Unmarshal(b, &wrapped) != nil || wrapped.Error.Code == "" {
			wrapped.Error = Error{Code: CodeAPI, Message: strings.TrimSpace(string(b))}
		}
		wrapped.Error.Status = resp.StatusCode
		return nil, &wrapped.Error
	}
	return resp, nil
}

// do sends in as JSON (when not nil) and decodes the answer into out
// (when not nil).
func (c *Client) do(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var body io.Reader
	ctype := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ctype = bytes.NewReader(b), "application/json"
	}
	resp, err := c.request(ctx, method, path, q, body, ctype)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func sb(id string) string { return "/v1/sandboxes/" + url.PathEscape(id) }

// Health is GET /v1/health.
type Health struct {
	Status    string `json:"status"`
	Version   string `json:"version"`
	Sandboxes int    `json:"sandboxes"` // running, of this tenant
}

// Health checks the server.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	var h Health
	return &h, c.do(ctx, "GET", "/v1/health", nil, nil, &h)
}

// CreateRequest makes a sandbox; the fields are pinfold run's flags.
// Over TCP a tenant cannot set Workspace or Mounts (its sandbox gets a
// fresh workspace of its own), and a field that names a host resource
// (a base, backend, network, allow entry, resolver, host variable) or a
// limit is refused (403, PF189) unless the server's policy grants it.
type CreateRequest struct {
	Name        string   `json:"name,omitempty"`
	IdleTimeout string   `json:"idle_timeout,omitempty"` // "30m"
	Workspace   string   `json:"workspace,omitempty"`
	Workdir     string   `json:"workdir,omitempty"`
	Base        string   `json:"base,omitempty"`
	Access      string   `json:"access,omitempty"`
	Backend     string   `json:"backend,omitempty"`
	Network     string   `json:"network,omitempty"`
	Allow       []string `json:"allow,omitempty"`
	Deny        []string `json:"deny,omitempty"`
	DNS         []string `json:"dns,omitempty"`
	Env         []string `json:"env,omitempty"`
	Mounts      []string `json:"mounts,omitempty"`
	User        string   `json:"user,omitempty"`
	Hostname    string   `json:"hostname,omitempty"`
	Memory      string   `json:"memory,omitempty"`
	Pids        string   `json:"pids,omitempty"`
	CPUs        string   `json:"cpus,omitempty"`
	Timeout     string   `json:"timeout,omitempty"`
	TmpSize     string   `json:"tmp_size,omitempty"`
	// Snapshot restores a snapshot (Client.Snapshot) into the new sandbox.
	Snapshot string `json:"snapshot,omitempty"`
	// Template names a template of the server's policy (tenants only):
	// its settings are the sandbox's where the request sets none.
	Template string `json:"template,omitempty"`
}

// Sandbox is a sandbox (a session) as the server describes it.
type Sandbox struct {
	ID        string    `json:"id"`
	Name      string    `json:"name,omitempty"`
	State     string    `json:"state"` // starting, running, paused, stopped, failed, lost
	Workspace string    `json:"workspace"`
	Backend   string    `json:"backend,omitempty"`
	Created   time.Time `json:"created"`
	Ended     time.Time `json:"ended,omitzero"`
	Changeset string    `json:"changeset,omitempty"`
	Idle      string    `json:"idle,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Error     string    `json:"error,omitempty"`
	Added     int       `json:"added,omitempty"`
	Modified  int       `json:"modified,omitempty"`
	Deleted   int       `json:"deleted,omitempty"`
}

// Create starts a sandbox and returns it once it runs.
func (c *Client) Create(ctx context.Context, r CreateRequest) (*Sandbox, error) {
	var s Sandbox
	return &s, c.do(ctx, "POST", "/v1/sandboxes", nil, r, &s)
}

// List lists the running sandboxes (all, with ended ones too).
func (c *Client) List(ctx context.Context, all bool) ([]Sandbox, error) {
	var l []Sandbox
	q := url.Values{}
	if all {
		q.Set("all", "true")
	}
	return l, c.do(ctx, "GET", "/v1/sandboxes", q, nil, &l)
}

// Get describes a sandbox by id, id prefix or name.
func (c *Client) Get(ctx context.Context, id string) (*Sandbox, error) {
	var s Sandbox
	return &s, c.do(ctx, "GET", sb(id), nil, nil, &s)
}

// Delete stops a sandbox; its changeset stays for Diff, Apply and Discard.
func (c *Client) Delete(ctx context.Context, id string) (*Sandbox, error) {
	var s Sandbox
	return &s, c.do(ctx, "DELETE", sb(id), nil, nil, &s)
}

// ExecRequest runs a command and collects its output.
type ExecRequest struct {
	Args    []string `json:"args"`
	Env     []string `json:"env,omitempty"`
	Dir     string   `json:"dir,omitempty"`
	Stdin   string   `json:"stdin,omitempty"`
	Timeout string   `json:"timeout,omitempty"` // "10s"
}

// ExecResult is how the command ended (each output is capped at 8 MiB).
// Truncated says output is missing: over the cap, or written by a process
// the command left running after it ended.
type ExecResult struct {
	ExitCode  int    `json:"exit_code"`
	Signal    int    `json:"signal,omitempty"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Truncated bool   `json:"truncated,omitempty"`
	TimedOut  bool   `json:"timed_out,omitempty"`
	Error     string `json:"error,omitempty"`
}

// Exec runs a command in a sandbox and waits for it.
func (c *Client) Exec(ctx context.Context, id string, r ExecRequest) (*ExecResult, error) {
	var res ExecResult
	return &res, c.do(ctx, "POST", sb(id)+"/exec", nil, r, &res)
}

// FileInfo describes a file in a sandbox.
type FileInfo struct {
	Name     string    `json:"name"`
	Size     int64     `json:"size"`
	Mode     uint32    `json:"mode"`
	Type     string    `json:"type"` // file, dir, symlink, other
	Target   string    `json:"target,omitempty"`
	Modified time.Time `json:"modified"`
}

func pathQuery(path string) url.Values { return url.Values{"path": {path}} }

// ReadFile copies a file of the sandbox to w.
func (c *Client) ReadFile(ctx context.Context, id, path string, w io.Writer) error {
	resp, err := c.request(ctx, "GET", sb(id)+"/files", pathQuery(path), nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	return err
}

// WriteFile writes r to a file of the sandbox with permissions mode
// (0 means 0644), whole or not at all.
func (c *Client) WriteFile(ctx context.Context, id, path string, mode uint32, r io.Reader) error {
	q := pathQuery(path)
	if mode != 0 {
		q.Set("mode", strconv.FormatUint(uint64(mode), 8))
	}
	resp, err := c.request(ctx, "PUT", sb(id)+"/files", q, r, "application/octet-stream")
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// Stat describes a path of the sandbox.
func (c *Client) Stat(ctx context.Context, id, path string) (*FileInfo, error) {
	var fi FileInfo
	return &fi, c.do(ctx, "GET", sb(id)+"/files/stat", pathQuery(path), nil, &fi)
}

// ListFiles lists a directory of the sandbox.
func (c *Client) ListFiles(ctx context.Context, id, path string) ([]FileInfo, error) {
	var l []FileInfo
	return l, c.do(ctx, "GET", sb(id)+"/files/list", pathQuery(path), nil, &l)
}

// Remove deletes a path of the sandbox (a directory with recursive).
func (c *Client) Remove(ctx context.Context, id, path string, recursive bool) error {
	q := pathQuery(path)
	if recursive {
		q.Set("recursive", "true")
	}
	return c.do(ctx, "DELETE", sb(id)+"/files", q, nil, nil)
}

// Diff returns the sandbox's changeset as a unified diff, or with format
// "stat", "name-status" or "json", in that form.
func (c *Client) Diff(ctx context.Context, id, format string) (string, error) {
	q := url.Values{}
	if format != "" {
		q.Set("format", format)
	}
	resp, err := c.request(ctx, "GET", sb(id)+"/changeset", q, nil, "")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// Apply writes a stopped sandbox's changeset into its workspace.
func (c *Client) Apply(ctx context.Context, id string, force bool) error {
	q := url.Values{}
	if force {
		q.Set("force", "true")
	}
	return c.do(ctx, "POST", sb(id)+"/changeset/apply", q, nil, nil)
}

// ApplyPolicy is Apply for a changeset that adds, changes or removes a
// pinfold.yaml, which Apply refuses (403, PF186): later runs obey that
// file and run its pre_run hooks on the host. The server's owner may; a
// tenant only if the operator's policy allows it (apply_policy).
func (c *Client) ApplyPolicy(ctx context.Context, id string, force bool) error {
	q := url.Values{"policy": {"true"}}
	if force {
		q.Set("force", "true")
	}
	return c.do(ctx, "POST", sb(id)+"/changeset/apply", q, nil, nil)
}

// Discard throws a stopped sandbox's changeset away.
func (c *Client) Discard(ctx context.Context, id string) error {
	return c.do(ctx, "POST", sb(id)+"/changeset/discard", nil, nil, nil)
}

// Port is a sandbox port published on the host's loopback.
type Port struct {
	Port int    `json:"port"`
	Host string `json:"host"` // ADDR:PORT on the host
}

// Publish forwards hostPort (0: any free one) of the host's 127.0.0.1 to
// port on the sandbox's loopback, while the sandbox runs.
func (c *Client) Publish(ctx context.Context, id string, port, hostPort int) (*Port, error) {
	var p Port
	return &p, c.do(ctx, "POST", sb(id)+"/ports", nil, map[string]int{"port": port, "host_port": hostPort}, &p)
}

// Unpublish stops forwarding port.
func (c *Client) Unpublish(ctx context.Context, id string, port int) error {
	return c.do(ctx, "DELETE", sb(id)+"/ports/"+strconv.Itoa(port), nil, nil, nil)
}

// Ports lists the published ports of a sandbox.
func (c *Client) Ports(ctx context.Context, id string) ([]Port, error) {
	var l []Port
	return l, c.do(ctx, "GET", sb(id)+"/ports", nil, nil, &l)
}

// Logs copies a sandbox's log to w.
func (c *Client) Logs(ctx context.Context, id string, w io.Writer) error {
	resp, err := c.request(ctx, "GET", sb(id)+"/logs", nil, nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	return err
}

// Pause freezes every process of a sandbox; its idle time stops too.
func (c *Client) Pause(ctx context.Context, id string) (*Sandbox, error) {
	var s Sandbox
	return &s, c.do(ctx, "POST", sb(id)+"/pause", nil, nil, &s)
}

// Resume thaws a paused sandbox.
func (c *Client) Resume(ctx context.Context, id string) (*Sandbox, error) {
	var s Sandbox
	return &s, c.do(ctx, "POST", sb(id)+"/resume", nil, nil, &s)
}

// Snapshot is a sandbox's changeset saved as an OCI layer.
type Snapshot struct {
	ID        string    `json:"id"`
	Session   string    `json:"session"`
	Workspace string    `json:"workspace"`
	Created   time.Time `json:"created"`
	Digest    string    `json:"digest"`
	Size      int64     `json:"size"`
	MediaType string    `json:"media_type"`
}

// Snapshot saves what a sandbox has written so far; CreateRequest.Snapshot
// restores it into a new sandbox.
func (c *Client) Snapshot(ctx context.Context, id string) (*Snapshot, error) {
	var s Snapshot
	return &s, c.do(ctx, "POST", sb(id)+"/snapshot", nil, nil, &s)
}
