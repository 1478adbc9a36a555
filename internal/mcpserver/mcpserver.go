// Package mcpserver is pinfold's Model Context Protocol server (pinfold
// mcp): tools through which a coding agent runs commands in sandboxes,
// works in sessions, and sees what it changed as a changeset's diff.
//
// The tools have no run logic of their own: each is one or more requests
// to the HTTP API's handlers (internal/server), served in this process as
// the caller's tenant, so that a tool does exactly what the API does under
// the same policy, limits and tenant isolation. It lives in the pinfold-api
// helper binary with the server: the MCP SDK is never part of pinfold's
// own start-up.
package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"path"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pinfold/pinfold/client"
)

// Config is what a server's tools act on.
type Config struct {
	// API is the HTTP API as the caller's tenant (server.AsTenant).
	API http.Handler
	// Workspace is where the owner's sessions start (an absolute path);
	// empty for a tenant, whose sessions get fresh workspaces.
	Workspace string
	// Apply offers the apply and discard tools (pinfold.yaml's mcp.apply).
	Apply bool
	// Version is the server's version, as the initialize answer gives it.
	Version string
	// Pinfold is the pinfold binary, for the owner only: run is then
	// pinfold run itself in Workspace (dispatch, hooks and the host
	// backend's allow-list as on the command line), and diff, apply and
	// discard also take the changeset it returns.
	Pinfold string
}

// New makes an MCP server with pinfold's tools.
func New(c Config) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "pinfold", Title: "pinfold sandboxes", Version: c.Version},
		&mcp.ServerOptions{Instructions: instructions(c.Apply)})
	t := &tools{cfg: c}
	mcp.AddTool(s, &mcp.Tool{Name: "run", Description: "Run one command in a fresh sandbox under the workspace's pinfold.yaml policy, " +
		"as pinfold run does, and return its output and exit status. Its writes are kept as a changeset (see the diff tool with the changeset or session it returns), never written to the workspace."}, t.run)
	mcp.AddTool(s, &mcp.Tool{Name: "session_start", Description: "Start a sandbox session that stays up between commands; returns its id."}, t.start)
	mcp.AddTool(s, &mcp.Tool{Name: "session_exec", Description: "Run a command in a running session and return its output and exit status."}, t.exec)
	mcp.AddTool(s, &mcp.Tool{Name: "session_stop", Description: "Stop a session. Its changeset is kept for review."}, t.stop)
	mcp.AddTool(s, &mcp.Tool{Name: "session_list", Description: "List the sessions, with their state and changeset."}, t.list)
	mcp.AddTool(s, &mcp.Tool{Name: "file_read", Description: "Read a file in a running session (a path inside the sandbox)."}, t.read)
	mcp.AddTool(s, &mcp.Tool{Name: "file_write", Description: "Write a file in a running session; the write joins its changeset."}, t.write)
	mcp.AddTool(s, &mcp.Tool{Name: "file_list", Description: "List a directory in a running session."}, t.listDir)
	mcp.AddTool(s, &mcp.Tool{Name: "diff", Description: "Show a changeset, a session's or a run's: what its commands and writes changed in the workspace, as a unified diff (or stat, name-status)."}, t.diff)
	if c.Apply {
		mcp.AddTool(s, &mcp.Tool{Name: "apply", Description: "Apply a changeset (a stopped session's or a run's) to the workspace."}, t.apply)
		mcp.AddTool(s, &mcp.Tool{Name: "discard", Description: "Discard a changeset (a stopped session's or a run's)."}, t.discard)
	}
	return s
}

func instructions(apply bool) string {
	s := "pinfold runs commands in sandboxes and keeps every write to the workspace aside as a changeset. " +
		"Use run for one command, or session_start, session_exec and the file tools for several, then diff to see the changes."
	if apply {
		return s + " apply and discard end a stopped session's changeset."
	}
	return s + " A person reviews and applies the changeset (pinfold apply): this server cannot."
}

type tools struct{ cfg Config }

// apiError is the API's error body, as a tool's error.
type apiError struct {
	Code, Message, Fix string
}

func (e *apiError) Error() string {
	s := e.Code + " " + e.Message
	if e.Fix != "" {
		s += " (" + e.Fix + ")"
	}
	return s
}

// maxAnswer bounds what a tool keeps of an API answer in memory: a file
// read of /dev/zero, or a huge diff, must not fill the server's memory.
const maxAnswer = 8 << 20

// errAnswerTooLarge is an answer over maxAnswer.
var errAnswerTooLarge = fmt.Errorf("the answer is over %d MiB: read it in parts (file_read of a smaller file, diff of some paths), or through pinfold's HTTP API, which streams it", maxAnswer>>20)

// recorder is the answer of a request served in this process, kept up to
// maxAnswer bytes; past it, writes fail and the request is cancelled.
type recorder struct {
	h      http.Header
	status int
	body   bytes.Buffer
	over   bool
	cancel context.CancelFunc
}

func (r *recorder) Header() http.Header { return r.h }
func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = 200
	}
	if r.over || r.body.Len()+len(p) > maxAnswer {
		r.over = true
		r.cancel()
		return 0, errAnswerTooLarge
	}
	return r.body.Write(p)
}
func (r *recorder) WriteHeader(s int) {
	if r.status == 0 {
		r.status = s
	}
}

// call serves one API request; an answer of 400 or more is an *apiError.
func (t *tools) call(ctx context.Context, method, path string, q url.Values, body io.Reader) ([]byte, error) {
	u := "http://pinfold" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	rec := &recorder{h: http.Header{}, cancel: cancel}
	t.cfg.API.ServeHTTP(rec, req)
	if rec.over {
		return nil, errAnswerTooLarge
	}
	if rec.status == 0 {
		rec.status = 200
	}
	if rec.status >= 400 {
		var e struct{ Error client.Error }
		if json.Unmarshal(rec.body.Bytes(), &e) == nil && e.Error.Code != "" {
			return nil, &apiError{Code: e.Error.Code, Message: e.Error.Message, Fix: e.Error.Fix}
		}
		return nil, fmt.Errorf("%s %s: %d %s", method, path, rec.status, strings.TrimSpace(rec.body.String()))
	}
	return rec.body.Bytes(), nil
}

// callJSON sends v as JSON and decodes the answer into out (if not nil).
func (t *tools) callJSON(ctx context.Context, method, path string, v, out any) error {
	var body io.Reader
	if v != nil {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	data, err := t.call(ctx, method, path, nil, body)
	if err != nil || out == nil {
		return err
	}
	return json.Unmarshal(data, out)
}

func sandboxPath(id string, more ...string) string {
	return "/v1/sandboxes/" + url.PathEscape(id) + strings.Join(more, "")
}

// Session is a session as the tools report it.
type Session struct {
	ID        string `json:"id"`
	Name      string `json:"name,omitempty"`
	State     string `json:"state"`
	Workspace string `json:"workspace"`
	Changeset string `json:"changeset,omitempty" jsonschema:"the changeset that keeps the session's writes"`
	Added     int    `json:"added,omitempty"`
	Modified  int    `json:"modified,omitempty"`
	Deleted   int    `json:"deleted,omitempty"`
	Error     string `json:"error,omitempty"`
}

// StartIn is session_start's input.
type StartIn struct {
	Name string `json:"name,omitempty" jsonschema:"a name for the session (letters, digits, - and _)"`
}

func (t *tools) create(ctx context.Context, name string) (*Session, error) {
	var s Session
	err := t.callJSON(ctx, "POST", "/v1/sandboxes", client.CreateRequest{Name: name, Workspace: t.cfg.Workspace}, &s)
	return &s, err
}

func (t *tools) start(ctx context.Context, _ *mcp.CallToolRequest, in StartIn) (*mcp.CallToolResult, *Session, error) {
	s, err := t.create(ctx, in.Name)
	if err != nil {
		return nil, nil, err
	}
	return nil, s, nil
}

// ExecIn is session_exec's input.
type ExecIn struct {
	Session string   `json:"session" jsonschema:"the session's id or name"`
	Command []string `json:"command" jsonschema:"the command and its arguments, not a shell line (use [\"sh\", \"-c\", LINE] for one)"`
	Stdin   string   `json:"stdin,omitempty" jsonschema:"text given on standard input"`
	Dir     string   `json:"dir,omitempty" jsonschema:"the working directory inside the sandbox"`
	Env     []string `json:"env,omitempty" jsonschema:"more environment variables, NAME=VALUE"`
	Timeout string   `json:"timeout,omitempty" jsonschema:"a duration after which the command is killed, like 30s"`
}

func (t *tools) execIn(ctx context.Context, in ExecIn) (*client.ExecResult, error) {
	if len(in.Command) == 0 {
		return nil, errors.New("command is empty")
	}
	var res client.ExecResult
	err := t.callJSON(ctx, "POST", sandboxPath(in.Session, "/exec"),
		client.ExecRequest{Args: in.Command, Env: in.Env, Dir: in.Dir, Stdin: in.Stdin, Timeout: in.Timeout}, &res)
	return &res, err
}

// result is a command's answer: its output as text for the model, with
// IsError when the command failed, and the whole as structured content.
func result[T any](out T, code int, failed bool, stdout, stderr string) (*mcp.CallToolResult, T, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "exit status %d", code)
	if stdout != "" {
		b.WriteString("\nstdout:\n" + stdout)
	}
	if stderr != "" {
		b.WriteString("\nstderr:\n" + stderr)
	}
	js, _ := json.Marshal(out)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}, &mcp.TextContent{Text: string(js)}},
		IsError: code != 0 || failed}, out, nil
}

func (t *tools) exec(ctx context.Context, _ *mcp.CallToolRequest, in ExecIn) (*mcp.CallToolResult, *client.ExecResult, error) {
	r, err := t.execIn(ctx, in)
	if err != nil {
		return nil, nil, err
	}
	return result(r, r.ExitCode, r.Signal != 0 || r.TimedOut, r.Stdout, r.Stderr)
}

// RunIn is run's input.
type RunIn struct {
	Command []string `json:"command" jsonschema:"the command and its arguments, not a shell line (use [\"sh\", \"-c\", LINE] for one)"`
	Stdin   string   `json:"stdin,omitempty" jsonschema:"text given on standard input"`
	Env     []string `json:"env,omitempty" jsonschema:"more environment variables, NAME=VALUE"`
	Timeout string   `json:"timeout,omitempty" jsonschema:"a duration after which the command is killed, like 30s"`
}

// RunOut is run's answer.
type RunOut struct {
	ExitCode  int      `json:"exit_code"`
	Signal    string   `json:"signal,omitempty" jsonschema:"the signal that ended the command"`
	Stdout    string   `json:"stdout"`
	Stderr    string   `json:"stderr" jsonschema:"the command's, and pinfold's notes (the changeset's summary, what the policy blocked)"`
	Truncated bool     `json:"truncated,omitempty" jsonschema:"an output was over 8 MiB and is cut"`
	TimedOut  bool     `json:"timed_out,omitempty"`
	LimitsHit []string `json:"limits_hit,omitempty" jsonschema:"the limits the command hit: memory, pids, tmp, timeout, disk"`
	Blocked   int      `json:"blocked,omitempty" jsonschema:"how many connections the network policy blocked"`
	// Changeset is the owner's run's: pinfold run's own.
	Changeset *RunChangeset `json:"changeset,omitempty" jsonschema:"the changeset that keeps what the command wrote: its id is diff's changeset"`
	// Session is a tenant's run's: the stopped session it ran in.
	Session *Session `json:"session,omitempty" jsonschema:"the stopped session the command ran in: its id is diff's session"`
}

// run is pinfold run for the owner (pinfoldRun). A tenant, who reaches
// nothing of the host, gets a session started in a fresh workspace
// within the operator's policy, used once and stopped: the session keeps
// the changeset.
func (t *tools) run(ctx context.Context, _ *mcp.CallToolRequest, in RunIn) (*mcp.CallToolResult, *RunOut, error) {
	if len(in.Command) == 0 {
		return nil, nil, errors.New("command is empty")
	}
	if t.cfg.Pinfold != "" {
		r, err := t.pinfoldRun(ctx, in)
		if err != nil {
			return nil, nil, err
		}
		return result(r, r.ExitCode, r.Signal != "" || r.TimedOut, r.Stdout, r.Stderr)
	}
	s, err := t.create(ctx, "")
	if err != nil {
		return nil, nil, err
	}
	r, err := t.execIn(ctx, ExecIn{Session: s.ID, Command: in.Command, Stdin: in.Stdin, Env: in.Env, Timeout: in.Timeout})
	stopped, serr := t.stopID(context.WithoutCancel(ctx), s.ID)
	if err != nil {
		return nil, nil, err
	}
	if serr != nil {
		return nil, nil, serr
	}
	out := &RunOut{ExitCode: r.ExitCode, Stdout: r.Stdout, Stderr: r.Stderr, Truncated: r.Truncated, TimedOut: r.TimedOut, Session: stopped}
	if r.Signal != 0 {
		out.Signal = fmt.Sprint(r.Signal)
	}
	return result(out, r.ExitCode, r.Signal != 0 || r.TimedOut, r.Stdout, r.Stderr)
}

// SessionIn names a session.
type SessionIn struct {
	Session string `json:"session" jsonschema:"the session's id or name"`
}

func (t *tools) stopID(ctx context.Context, id string) (*Session, error) {
	var s Session
	err := t.callJSON(ctx, "DELETE", sandboxPath(id), nil, &s)
	return &s, err
}

func (t *tools) stop(ctx context.Context, _ *mcp.CallToolRequest, in SessionIn) (*mcp.CallToolResult, *Session, error) {
	s, err := t.stopID(ctx, in.Session)
	if err != nil {
		return nil, nil, err
	}
	return nil, s, nil
}

// ListIn is session_list's input.
type ListIn struct {
	All bool `json:"all,omitempty" jsonschema:"also the stopped sessions"`
}

// ListOut is session_list's answer.
type ListOut struct {
	Sessions []Session `json:"sessions"`
}

func (t *tools) list(ctx context.Context, _ *mcp.CallToolRequest, in ListIn) (*mcp.CallToolResult, *ListOut, error) {
	q := url.Values{}
	if in.All {
		q.Set("all", "true")
	}
	data, err := t.call(ctx, "GET", "/v1/sandboxes", q, nil)
	if err != nil {
		return nil, nil, err
	}
	out := &ListOut{Sessions: []Session{}}
	if err := json.Unmarshal(data, &out.Sessions); err != nil {
		return nil, nil, err
	}
	return nil, out, nil
}

// FileIn names a file in a session.
type FileIn struct {
	Session string `json:"session" jsonschema:"the session's id or name"`
	Path    string `json:"path" jsonschema:"a path inside the sandbox; a relative one is in the workspace"`
}

// FileOut is a file's content.
type FileOut struct {
	Content string `json:"content"`
}

func (t *tools) read(ctx context.Context, _ *mcp.CallToolRequest, in FileIn) (*mcp.CallToolResult, *FileOut, error) {
	data, err := t.call(ctx, "GET", sandboxPath(in.Session, "/files"), url.Values{"path": {in.Path}}, nil)
	if err != nil {
		return nil, nil, err
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(data)}}}, &FileOut{Content: string(data)}, nil
}

// WriteIn is file_write's input.
type WriteIn struct {
	Session string `json:"session" jsonschema:"the session's id or name"`
	Path    string `json:"path" jsonschema:"a path inside the sandbox; a relative one is in the workspace"`
	Content string `json:"content" jsonschema:"the file's whole new content (missing directories are made)"`
	Mode    string `json:"mode,omitempty" jsonschema:"octal permissions, like 0755 (default 0644)"`
}

// Done says a tool did what it was asked.
type Done struct {
	OK bool `json:"ok"`
}

func (t *tools) write(ctx context.Context, _ *mcp.CallToolRequest, in WriteIn) (*mcp.CallToolResult, *Done, error) {
	q := url.Values{"path": {in.Path}}
	if in.Mode != "" {
		q.Set("mode", in.Mode)
	}
	// An agent writes new files in new directories: they are made in
	// the sandbox first, as the agent's own mkdir -p would (the agent's
	// upload makes none).
	if dir := path.Dir(in.Path); dir != "." && dir != "/" {
		if _, err := t.call(ctx, "GET", sandboxPath(in.Session, "/files/stat"), url.Values{"path": {dir}}, nil); err != nil {
			r, err := t.execIn(ctx, ExecIn{Session: in.Session, Command: []string{"mkdir", "-p", "--", dir}})
			if err != nil {
				return nil, nil, err
			}
			if r.ExitCode != 0 {
				return nil, nil, fmt.Errorf("cannot make %s: %s", dir, strings.TrimSpace(r.Stderr))
			}
		}
	}
	if _, err := t.call(ctx, "PUT", sandboxPath(in.Session, "/files"), q, strings.NewReader(in.Content)); err != nil {
		return nil, nil, err
	}
	return nil, &Done{OK: true}, nil
}

// Entry is a file of a listed directory.
type Entry struct {
	Name     string    `json:"name"`
	Type     string    `json:"type" jsonschema:"file, dir, symlink or other"`
	Size     int64     `json:"size"`
	Mode     uint32    `json:"mode"`
	Target   string    `json:"target,omitempty"`
	Modified time.Time `json:"modified"`
}

// DirOut is file_list's answer.
type DirOut struct {
	Entries []Entry `json:"entries"`
}

func (t *tools) listDir(ctx context.Context, _ *mcp.CallToolRequest, in FileIn) (*mcp.CallToolResult, *DirOut, error) {
	if in.Path == "" {
		in.Path = "."
	}
	data, err := t.call(ctx, "GET", sandboxPath(in.Session, "/files/list"), url.Values{"path": {in.Path}}, nil)
	if err != nil {
		return nil, nil, err
	}
	out := &DirOut{Entries: []Entry{}}
	if err := json.Unmarshal(data, &out.Entries); err != nil {
		return nil, nil, err
	}
	return nil, out, nil
}

// DiffIn is diff's input.
type DiffIn struct {
	Session   string `json:"session,omitempty" jsonschema:"the session's id or name"`
	Changeset string `json:"changeset,omitempty" jsonschema:"or a changeset's id, as run returns it"`
	Format    string `json:"format,omitempty" jsonschema:"diff (the default), stat or name-status"`
}

// DiffOut is a changeset's diff.
type DiffOut struct {
	Diff string `json:"diff"`
}

func (t *tools) diff(ctx context.Context, _ *mcp.CallToolRequest, in DiffIn) (*mcp.CallToolResult, *DiffOut, error) {
	var data []byte
	var err error
	if in.Changeset != "" {
		args := []string{"diff", in.Changeset}
		switch in.Format {
		case "", "diff":
		case "stat", "name-status":
			args = append(args, "--"+in.Format)
		default:
			return nil, nil, errors.New("unknown format " + in.Format + ": use diff, stat or name-status")
		}
		data, err = t.cli(ctx, in, args...)
	} else {
		q := url.Values{}
		if in.Format != "" {
			q.Set("format", in.Format)
		}
		data, err = t.call(ctx, "GET", sandboxPath(in.Session, "/changeset"), q, nil)
	}
	if err != nil {
		return nil, nil, err
	}
	text := string(data)
	if text == "" {
		text = "(no changes)"
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, &DiffOut{Diff: string(data)}, nil
}

// cli runs pinfold ARGS in the workspace for the owner (a changeset named
// by its id is the CLI's business); its error is what pinfold said.
func (t *tools) cli(ctx context.Context, in DiffIn, args ...string) ([]byte, error) {
	if in.Session != "" {
		return nil, errors.New("give a session or a changeset, not both")
	}
	if t.cfg.Pinfold == "" {
		return nil, errors.New("a tenant names its changesets by their session: give session")
	}
	cmd := exec.CommandContext(ctx, t.cfg.Pinfold, args...)
	cmd.Dir = t.cfg.Workspace
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(stderr.String()), "pinfold: "))
		if msg == "" {
			msg = err.Error()
		}
		return nil, errors.New(msg)
	}
	return append(out, stderr.Bytes()...), nil
}

// FinishIn names the changeset apply or discard ends.
type FinishIn struct {
	Session   string `json:"session,omitempty" jsonschema:"a stopped session's id or name"`
	Changeset string `json:"changeset,omitempty" jsonschema:"or a changeset's id, as run returns it"`
}

// Finished is apply's or discard's answer.
type Finished struct {
	Changeset string `json:"changeset"`
	Applied   int    `json:"applied,omitempty"`
	Discarded bool   `json:"discarded,omitempty"`
	Message   string `json:"message,omitempty"`
}

func (t *tools) finish(ctx context.Context, in FinishIn, verb string) (*mcp.CallToolResult, *Finished, error) {
	if in.Changeset != "" {
		out, err := t.cli(ctx, DiffIn{Session: in.Session}, verb, in.Changeset)
		if err != nil {
			return nil, nil, err
		}
		return nil, &Finished{Changeset: in.Changeset, Discarded: verb == "discard", Message: strings.TrimSpace(string(out))}, nil
	}
	var f Finished
	if err := t.callJSON(ctx, "POST", sandboxPath(in.Session, "/changeset/"+verb), nil, &f); err != nil {
		return nil, nil, err
	}
	return nil, &f, nil
}

func (t *tools) apply(ctx context.Context, _ *mcp.CallToolRequest, in FinishIn) (*mcp.CallToolResult, *Finished, error) {
	return t.finish(ctx, in, "apply")
}

func (t *tools) discard(ctx context.Context, _ *mcp.CallToolRequest, in FinishIn) (*mcp.CallToolResult, *Finished, error) {
	return t.finish(ctx, in, "discard")
}
