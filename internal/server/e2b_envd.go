package server

// The E2B protocol's sandbox plane (envd): Connect RPC with the JSON codec
// for the process and filesystem services, and /files, on the same port
// as everything else, the sandbox named by the E2b-Sandbox-Id header.
// Processes run through the session's agent, like pinfold's own exec; a
// process table per sandbox holds each one's agent connection, so that
// later calls (Connect, SendInput, SendSignal, Update, CloseStdin, List)
// find it by pid.

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pinfold/pinfold/internal/agent"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/session"
)

// rpcError is a Connect error: its code and message.
type rpcError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *rpcError) Error() string { return e.Code + ": " + e.Message }

func rpcErr(code, format string, a ...any) *rpcError {
	return &rpcError{Code: code, Message: fmt.Sprintf(format, a...)}
}

// rpcStatus is the HTTP status of a unary Connect error.
var rpcStatus = map[string]int{
	"invalid_argument": 400, "unauthenticated": 401, "permission_denied": 403, "not_found": 404,
	"already_exists": 409, "failed_precondition": 400, "unimplemented": 501, "internal": 500,
	"unavailable": 503, "resource_exhausted": 429,
}

// writeRPCError answers a unary call with e. A sandbox that is not
// running answers 502, which the SDK reads as "the sandbox was killed or
// timed out", as E2B's own proxy does.
func writeRPCError(w http.ResponseWriter, e *rpcError) {
	st, ok := rpcStatus[e.Code]
	if !ok {
		st = 500
	}
	if e.Code == "unavailable" {
		st = http.StatusBadGateway
	}
	writeJSON(w, st, e)
}

// envdSandbox is the running session the request's E2b-Sandbox-Id names,
// of tenant t.
func (s *Server) envdSandbox(r *http.Request, t string) (*session.Record, *rpcError) {
	id := r.Header.Get("E2b-Sandbox-Id")
	rec, ok := s.e2bRecord(id)
	if !ok || rec.Tenant != t {
		return nil, rpcErr("unavailable", "%s: sandbox %q not found", fault.SessionNotFound, id)
	}
	if rec.State != session.StateRunning {
		return nil, rpcErr("unavailable", "%s: sandbox %s is %s", fault.SessionEnded, id, rec.State)
	}
	return rec, nil
}

// maxRPC bounds an RPC's request message.
const maxRPC = 1 << 20

// e2bRPC serves a Connect call: unary with application/json, server
// streams with application/connect+json (one enveloped request message).
func (s *Server) e2bRPC(w http.ResponseWriter, r *http.Request, t string) {
	method := r.URL.Path[1:]
	stream := strings.HasPrefix(r.Header.Get("Content-Type"), "application/connect+json")
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRPC+5))
	if err != nil {
		writeRPCError(w, rpcErr("resource_exhausted", "request over %d bytes", maxRPC))
		return
	}
	if stream {
		if len(body) < 5 || body[0] != 0 || int(binary.BigEndian.Uint32(body[1:5])) != len(body)-5 {
			// connect-web reads no body of a failed stream, only the
			// status; the JSON is for other clients.
			writeRPCError(w, rpcErr("invalid_argument", "one uncompressed envelope expected"))
			return
		}
		body = body[5:]
	}
	rec, rerr := s.envdSandbox(r, t)
	if rerr != nil {
		writeRPCError(w, rerr)
		return
	}
	if stream {
		var run func(context.Context, *streamWriter) *rpcError
		switch method {
		case "process.Process/Start":
			run = func(ctx context.Context, sw *streamWriter) *rpcError { return s.procStart(ctx, rec, body, sw) }
		case "process.Process/Connect":
			run = func(ctx context.Context, sw *streamWriter) *rpcError { return s.procConnect(ctx, rec, body, sw) }
		case "filesystem.Filesystem/WatchDir":
			run = func(ctx context.Context, sw *streamWriter) *rpcError { return s.watchDir(ctx, rec, body, sw) }
		default:
			writeRPCError(w, rpcErr("unimplemented", "%s: %s is not supported by pinfold's E2B API (docs/e2b.md)", fault.E2BUnsupported, method))
			return
		}
		w.Header().Set("Content-Type", "application/connect+json")
		w.WriteHeader(http.StatusOK)
		sw := &streamWriter{w: w, rc: http.NewResponseController(w)}
		sw.rc.Flush()
		err := run(r.Context(), sw)
		sw.end(err)
		return
	}
	var out any
	var e *rpcError
	sock := s.st.Sock(rec.ID)
	ctx := r.Context()
	switch method {
	case "process.Process/List":
		out = s.procList(rec.ID)
	case "process.Process/SendInput", "process.Process/SendSignal", "process.Process/Update", "process.Process/CloseStdin":
		out, e = s.procControl(rec.ID, method, body)
	case "filesystem.Filesystem/Stat":
		out, e = fsStat(ctx, sock, body)
	case "filesystem.Filesystem/ListDir":
		out, e = fsListDir(ctx, sock, body)
	case "filesystem.Filesystem/MakeDir":
		out, e = fsMakeDir(ctx, sock, body)
	case "filesystem.Filesystem/Move":
		out, e = fsMove(ctx, sock, body)
	case "filesystem.Filesystem/Remove":
		out, e = fsRemove(ctx, sock, body)
	default:
		e = rpcErr("unimplemented", "%s: %s is not supported by pinfold's E2B API (docs/e2b.md)", fault.E2BUnsupported, method)
	}
	if e != nil {
		writeRPCError(w, e)
		return
	}
	writeJSON(w, 200, out)
}

// streamWriter writes a Connect stream's envelopes; safe for concurrent
// use (events and keepalives).
type streamWriter struct {
	mu  sync.Mutex
	w   io.Writer
	rc  *http.ResponseController
	err error
}

func (sw *streamWriter) envelope(flags byte, v any) error {
	b, _ := json.Marshal(v)
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.err != nil {
		return sw.err
	}
	var h [5]byte
	h[0] = flags
	binary.BigEndian.PutUint32(h[1:], uint32(len(b)))
	if _, err := sw.w.Write(append(h[:], b...)); err != nil {
		sw.err = err
		return err
	}
	sw.err = sw.rc.Flush()
	return sw.err
}

func (sw *streamWriter) send(v any) error { return sw.envelope(0, v) }

// end writes the end envelope, which the SDK requires: {} or the error.
func (sw *streamWriter) end(e *rpcError) {
	if e != nil {
		sw.envelope(2, map[string]any{"error": e})
		return
	}
	sw.envelope(2, struct{}{})
}

// keepalive sends ev every interval until ctx ends, below the SDK's
// Keepalive-Ping-Interval of 50 s.
func (sw *streamWriter) keepalive(ctx context.Context, ev any) {
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if sw.send(ev) != nil {
				return
			}
		}
	}
}

// The process service's messages, as protojson writes them.
type (
	processConfig struct {
		Cmd  string            `json:"cmd"`
		Args []string          `json:"args,omitempty"`
		Envs map[string]string `json:"envs,omitempty"`
		Cwd  *string           `json:"cwd,omitempty"`
	}
	ptySize struct {
		Cols uint32 `json:"cols"`
		Rows uint32 `json:"rows"`
	}
	ptyConfig struct {
		Size *ptySize `json:"size"`
	}
	processSelector struct {
		Pid *uint32 `json:"pid,omitempty"`
		Tag *string `json:"tag,omitempty"`
	}
	startRequest struct {
		Process *processConfig `json:"process"`
		Pty     *ptyConfig     `json:"pty"`
		Tag     *string        `json:"tag"`
		Stdin   *bool          `json:"stdin"`
	}
	processEvent struct {
		Start *struct {
			Pid uint32 `json:"pid"`
		} `json:"start,omitempty"`
		Data      *dataEvent `json:"data,omitempty"`
		End       *endEvent  `json:"end,omitempty"`
		Keepalive *struct{}  `json:"keepalive,omitempty"`
	}
	dataEvent struct {
		Stdout []byte `json:"stdout,omitempty"`
		Stderr []byte `json:"stderr,omitempty"`
		Pty    []byte `json:"pty,omitempty"`
	}
	endEvent struct {
		ExitCode int32   `json:"exitCode"`
		Exited   bool    `json:"exited"`
		Status   string  `json:"status"`
		Error    *string `json:"error,omitempty"`
	}
	processEventMsg struct {
		Event processEvent `json:"event"`
	}
)

// proc is a process a sandbox runs for E2B.
type proc struct {
	pid  uint32
	tag  string
	cfg  processConfig
	conn *agent.Conn
	mu   sync.Mutex
	subs map[chan processEvent]struct{}
	done chan struct{}
}

// procTable is a sandbox's processes, by pid.
type procTable struct {
	mu    sync.Mutex
	procs map[uint32]*proc
}

// procs is sandbox id's table (an empty one when it runs nothing).
func (s *Server) procs(id string) *procTable {
	s.e2b.mu.Lock()
	defer s.e2b.mu.Unlock()
	if pt := s.e2b.procs[id]; pt != nil {
		return pt
	}
	return &procTable{procs: map[uint32]*proc{}}
}

// dropProcs hangs up the processes of a sandbox that ends.
func (s *Server) dropProcs(id string) {
	s.e2b.mu.Lock()
	pt := s.e2b.procs[id]
	delete(s.e2b.procs, id)
	s.e2b.mu.Unlock()
	if pt == nil {
		return
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	for _, p := range pt.procs {
		p.conn.Close()
	}
}

func (p *proc) subscribe() chan processEvent {
	ch := make(chan processEvent, 256)
	p.mu.Lock()
	p.subs[ch] = struct{}{}
	p.mu.Unlock()
	return ch
}

func (p *proc) unsubscribe(ch chan processEvent) {
	p.mu.Lock()
	delete(p.subs, ch)
	p.mu.Unlock()
}

// publish gives ev to every stream attached. A stream that does not keep
// up blocks the process's output, as a pipe would.
func (p *proc) publish(ev processEvent) {
	p.mu.Lock()
	subs := make([]chan processEvent, 0, len(p.subs))
	for ch := range p.subs {
		subs = append(subs, ch)
	}
	p.mu.Unlock()
	for _, ch := range subs {
		select {
		case ch <- ev:
		case <-time.After(30 * time.Second):
			p.unsubscribe(ch) // a stream gone without unsubscribing
		}
	}
}

func (s *Server) procStart(ctx context.Context, rec *session.Record, body []byte, sw *streamWriter) *rpcError {
	var req startRequest
	if err := json.Unmarshal(body, &req); err != nil || req.Process == nil || req.Process.Cmd == "" {
		return rpcErr("invalid_argument", "a process with a cmd is expected")
	}
	pc := req.Process
	ar := &agent.Request{Args: append([]string{pc.Cmd}, pc.Args...), Stdin: req.Stdin == nil || *req.Stdin}
	keys := make([]string, 0, len(pc.Envs))
	for k := range pc.Envs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ar.Env = append(ar.Env, k+"="+pc.Envs[k])
	}
	if pc.Cwd != nil {
		ar.Dir = *pc.Cwd
	}
	if req.Pty != nil {
		ar.TTY, ar.Stdin = true, true
		if req.Pty.Size != nil {
			ar.Rows, ar.Cols = uint16(req.Pty.Size.Rows), uint16(req.Pty.Size.Cols)
		}
	}
	conn, err := agent.StartExec(context.WithoutCancel(ctx), s.st.Sock(rec.ID), ar)
	if err != nil {
		return rpcErr("unavailable", "%s: cannot reach sandbox %s: %v", fault.SessionEnded, rec.ID, err)
	}
	// The pid comes first; a command that cannot start ends at once.
	var pid uint32
	var early *agent.Exit
	for pid == 0 && early == nil {
		typ, b, err := conn.Next()
		if err != nil {
			conn.Close()
			return rpcErr("unavailable", "%s: sandbox %s: %v", fault.SessionEnded, rec.ID, err)
		}
		switch typ {
		case agent.FrameStarted:
			n, _ := strconv.ParseUint(string(b), 10, 32)
			pid = uint32(n)
		case agent.FrameExit:
			early = &agent.Exit{}
			json.Unmarshal(b, early)
		}
	}
	if early != nil {
		conn.Close()
		// envd starts bash, which says a missing command; pinfold's agent
		// says it here, for any cmd.
		return rpcErr("invalid_argument", "%s", early.Error)
	}
	p := &proc{pid: pid, cfg: *pc, conn: conn, subs: map[chan processEvent]struct{}{}, done: make(chan struct{})}
	if req.Tag != nil {
		p.tag = *req.Tag
	}
	s.addProc(rec.ID, p)
	ch := p.subscribe()
	go s.pump(rec.ID, p, req.Pty != nil)
	return p.stream(ctx, ch, sw)
}

// addProc puts p in sandbox id's table.
func (s *Server) addProc(id string, p *proc) {
	s.e2b.mu.Lock()
	defer s.e2b.mu.Unlock()
	if s.e2b.procs == nil {
		s.e2b.procs = map[string]*procTable{}
	}
	pt := s.e2b.procs[id]
	if pt == nil {
		pt = &procTable{procs: map[uint32]*proc{}}
		s.e2b.procs[id] = pt
	}
	pt.mu.Lock()
	pt.procs[p.pid] = p
	pt.mu.Unlock()
}

// removeProc takes p out of sandbox id's table, and the table once empty.
func (s *Server) removeProc(id string, p *proc) {
	s.e2b.mu.Lock()
	defer s.e2b.mu.Unlock()
	pt := s.e2b.procs[id]
	if pt == nil {
		return
	}
	pt.mu.Lock()
	if pt.procs[p.pid] == p {
		delete(pt.procs, p.pid)
	}
	if len(pt.procs) == 0 {
		delete(s.e2b.procs, id)
	}
	pt.mu.Unlock()
}

// pump reads the agent's frames of p into events until it ends.
func (s *Server) pump(id string, p *proc, tty bool) {
	defer close(p.done)
	defer func() {
		s.removeProc(id, p)
		p.conn.Close()
	}()
	for {
		typ, b, err := p.conn.Next()
		if err != nil {
			msg := "the sandbox ended during the command"
			p.publish(processEvent{End: &endEvent{ExitCode: -1, Status: "killed", Error: &msg}})
			return
		}
		switch typ {
		case agent.FrameStdout:
			d := &dataEvent{Stdout: append([]byte(nil), b...)}
			if tty {
				d = &dataEvent{Pty: d.Stdout}
			}
			p.publish(processEvent{Data: d})
		case agent.FrameStderr:
			p.publish(processEvent{Data: &dataEvent{Stderr: append([]byte(nil), b...)}})
		case agent.FrameExit:
			var e agent.Exit
			json.Unmarshal(b, &e)
			end := &endEvent{ExitCode: int32(e.Code), Exited: e.Signal == 0, Status: "exit status " + strconv.Itoa(e.Code)}
			if e.Signal != 0 {
				end.ExitCode = -1
				end.Status = "signal: " + syscall.Signal(e.Signal).String()
			}
			if e.Error != "" {
				end.Error = &e.Error
			}
			p.publish(processEvent{End: end})
			return
		}
	}
}

// stream sends p's start and then the events of ch until its end, or
// until the client goes (the process runs on, as with envd).
func (p *proc) stream(ctx context.Context, ch chan processEvent, sw *streamWriter) *rpcError {
	defer p.unsubscribe(ch)
	if err := sw.send(processEventMsg{Event: processEvent{Start: &struct {
		Pid uint32 `json:"pid"`
	}{p.pid}}}); err != nil {
		return nil
	}
	kctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go sw.keepalive(kctx, processEventMsg{Event: processEvent{Keepalive: &struct{}{}}})
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-ch:
			if sw.send(processEventMsg{Event: ev}) != nil {
				return nil
			}
			if ev.End != nil {
				return nil
			}
		case <-p.done:
			// The end was published before done closed: drain it.
			for {
				select {
				case ev := <-ch:
					sw.send(processEventMsg{Event: ev})
					if ev.End != nil {
						return nil
					}
				default:
					return nil
				}
			}
		}
	}
}

// find is the process a selector names.
func (pt *procTable) find(sel *processSelector) (*proc, *rpcError) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if sel != nil && sel.Pid != nil {
		if p := pt.procs[*sel.Pid]; p != nil {
			return p, nil
		}
		return nil, rpcErr("not_found", "process with pid %d not found", *sel.Pid)
	}
	if sel != nil && sel.Tag != nil {
		for _, p := range pt.procs {
			if p.tag == *sel.Tag {
				return p, nil
			}
		}
		return nil, rpcErr("not_found", "process with tag %s not found", *sel.Tag)
	}
	return nil, rpcErr("invalid_argument", "a process selector (pid or tag) is expected")
}

func (s *Server) procConnect(ctx context.Context, rec *session.Record, body []byte, sw *streamWriter) *rpcError {
	var req struct {
		Process *processSelector `json:"process"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return rpcErr("invalid_argument", "%v", err)
	}
	p, e := s.procs(rec.ID).find(req.Process)
	if e != nil {
		return e
	}
	return p.stream(ctx, p.subscribe(), sw)
}

func (s *Server) procList(id string) any {
	type info struct {
		Config processConfig `json:"config"`
		Pid    uint32        `json:"pid"`
		Tag    string        `json:"tag,omitempty"`
	}
	pt := s.procs(id)
	pt.mu.Lock()
	out := []info{}
	for _, p := range pt.procs {
		out = append(out, info{Config: p.cfg, Pid: p.pid, Tag: p.tag})
	}
	pt.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Pid < out[j].Pid })
	return map[string]any{"processes": out}
}

// procControl serves SendInput, SendSignal, Update and CloseStdin.
func (s *Server) procControl(id, method string, body []byte) (any, *rpcError) {
	var req struct {
		Process *processSelector `json:"process"`
		Input   *struct {
			Stdin []byte `json:"stdin"`
			Pty   []byte `json:"pty"`
		} `json:"input"`
		Signal json.RawMessage `json:"signal"`
		Pty    *ptyConfig      `json:"pty"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, rpcErr("invalid_argument", "%v", err)
	}
	p, e := s.procs(id).find(req.Process)
	if e != nil {
		return nil, e
	}
	var err error
	switch method {
	case "process.Process/SendInput":
		if req.Input != nil {
			b := append(req.Input.Stdin, req.Input.Pty...)
			_, err = p.conn.Stdin().Write(b)
		}
	case "process.Process/CloseStdin":
		err = p.conn.Stdin().Close()
	case "process.Process/Update":
		if req.Pty != nil && req.Pty.Size != nil {
			err = p.conn.Resize(uint16(req.Pty.Size.Rows), uint16(req.Pty.Size.Cols))
		}
	case "process.Process/SendSignal":
		var sig syscall.Signal
		switch strings.Trim(string(req.Signal), `"`) {
		case "SIGNAL_SIGKILL", "9":
			sig = syscall.SIGKILL
		case "SIGNAL_SIGTERM", "15":
			sig = syscall.SIGTERM
		default:
			return nil, rpcErr("invalid_argument", "unknown signal %s", req.Signal)
		}
		err = p.conn.Signal(sig)
	}
	if err != nil {
		return nil, rpcErr("not_found", "process with pid %d: %v", p.pid, err)
	}
	return struct{}{}, nil
}

// entryInfo is the filesystem service's EntryInfo.
type entryInfo struct {
	Name          string  `json:"name"`
	Type          string  `json:"type"`
	Path          string  `json:"path"`
	Size          string  `json:"size"`
	Mode          uint32  `json:"mode"`
	Permissions   string  `json:"permissions"`
	Owner         string  `json:"owner"`
	Group         string  `json:"group"`
	ModifiedTime  string  `json:"modifiedTime,omitempty"`
	SymlinkTarget *string `json:"symlinkTarget,omitempty"`
}

func toEntry(dir string, fi *agent.FileInfo) entryInfo {
	e := entryInfo{Name: fi.Name, Path: dir, Size: strconv.FormatInt(fi.Size, 10), Mode: fi.Mode,
		Permissions: fs.FileMode(fi.Mode).String(), Owner: "sandbox", Group: "sandbox"}
	if !fi.Modified.IsZero() {
		e.ModifiedTime = fi.Modified.UTC().Format(time.RFC3339Nano)
	}
	switch fi.Type {
	case "file":
		e.Type = "FILE_TYPE_FILE"
	case "dir":
		e.Type = "FILE_TYPE_DIRECTORY"
		e.Mode |= uint32(fs.ModeDir)
		e.Permissions = (fs.FileMode(fi.Mode) | fs.ModeDir).String()
	case "symlink":
		e.Type = "FILE_TYPE_SYMLINK"
		t := fi.Target
		e.SymlinkTarget = &t
	default:
		e.Type = "FILE_TYPE_UNSPECIFIED"
	}
	return e
}

// fsError is the Connect error of a failed file operation.
func fsError(err error) *rpcError {
	var re *rpcError
	switch {
	case errors.As(err, &re):
		return re
	case errors.Is(err, fs.ErrNotExist):
		return rpcErr("not_found", "%v", err)
	case errors.Is(err, fs.ErrPermission):
		return rpcErr("permission_denied", "%v", err)
	}
	var oe *agent.OpError
	if errors.As(err, &oe) {
		return rpcErr("invalid_argument", "%v", err)
	}
	return rpcErr("unavailable", "%v", err)
}

type pathRequest struct {
	Path  string `json:"path"`
	Depth uint32 `json:"depth"`
}

func readPath(body []byte) (pathRequest, *rpcError) {
	var req pathRequest
	if err := json.Unmarshal(body, &req); err != nil || req.Path == "" {
		return req, rpcErr("invalid_argument", "a path is expected")
	}
	return req, nil
}

func stat(ctx context.Context, sock, p string) (entryInfo, error) {
	fi, err := agent.Stat(ctx, sock, p)
	if err != nil {
		return entryInfo{}, err
	}
	return toEntry(p, fi), nil
}

func fsStat(ctx context.Context, sock string, body []byte) (any, *rpcError) {
	req, e := readPath(body)
	if e != nil {
		return nil, e
	}
	ent, err := stat(ctx, sock, req.Path)
	if err != nil {
		return nil, fsError(err)
	}
	return map[string]any{"entry": ent}, nil
}

// maxListed bounds a ListDir answer and a WatchDir snapshot: a listing of
// the whole root, at any depth, held in the server's memory (and, for a
// watcher, made every watchEvery) must stop somewhere.
const maxListed = 100_000

// errListed is a listing past maxListed.
var errListed = rpcErr("resource_exhausted", "more than %d entries: list a smaller tree, or less deep", maxListed)

func fsListDir(ctx context.Context, sock string, body []byte) (any, *rpcError) {
	req, e := readPath(body)
	if e != nil {
		return nil, e
	}
	depth := max(req.Depth, 1)
	out := []entryInfo{}
	var walk func(dir string, d uint32) error
	walk = func(dir string, d uint32) error {
		list, err := agent.List(ctx, sock, dir)
		if err != nil {
			return err
		}
		for i := range list {
			if len(out) >= maxListed {
				return errListed
			}
			full := path.Join(dir, list[i].Name)
			out = append(out, toEntry(full, &list[i]))
			if list[i].Type == "dir" && d < depth {
				if err := walk(full, d+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(req.Path, 1); err != nil {
		return nil, fsError(err)
	}
	return map[string]any{"entries": out}, nil
}

// run runs a command of the sandbox's (for what the agent has no op for).
func run(ctx context.Context, sock string, args ...string) error {
	var errb capped
	errb.max = 4096
	e, err := agent.Exec(ctx, sock, &agent.Request{Args: args}, agent.ExecStreams{Stderr: &errb})
	if err != nil {
		return err
	}
	if e.Code != 0 || e.Error != "" {
		return fmt.Errorf("%s: %s%s", args[0], strings.TrimSpace(string(errb.b)), e.Error)
	}
	return nil
}

func fsMakeDir(ctx context.Context, sock string, body []byte) (any, *rpcError) {
	req, e := readPath(body)
	if e != nil {
		return nil, e
	}
	if _, err := agent.Stat(ctx, sock, req.Path); err == nil {
		return nil, rpcErr("already_exists", "%s exists", req.Path)
	}
	if err := run(ctx, sock, "mkdir", "-p", "--", req.Path); err != nil {
		return nil, rpcErr("invalid_argument", "%v", err)
	}
	ent, err := stat(ctx, sock, req.Path)
	if err != nil {
		return nil, fsError(err)
	}
	return map[string]any{"entry": ent}, nil
}

func fsMove(ctx context.Context, sock string, body []byte) (any, *rpcError) {
	var req struct{ Source, Destination string }
	if err := json.Unmarshal(body, &req); err != nil || req.Source == "" || req.Destination == "" {
		return nil, rpcErr("invalid_argument", "source and destination are expected")
	}
	if _, err := agent.Stat(ctx, sock, req.Source); err != nil {
		return nil, fsError(err)
	}
	if err := run(ctx, sock, "mv", "-T", "-f", "--", req.Source, req.Destination); err != nil {
		return nil, rpcErr("invalid_argument", "%v", err)
	}
	ent, err := stat(ctx, sock, req.Destination)
	if err != nil {
		return nil, fsError(err)
	}
	return map[string]any{"entry": ent}, nil
}

func fsRemove(ctx context.Context, sock string, body []byte) (any, *rpcError) {
	req, e := readPath(body)
	if e != nil {
		return nil, e
	}
	if err := agent.Remove(ctx, sock, req.Path, true); err != nil {
		return nil, fsError(err)
	}
	return struct{}{}, nil
}

// watchDir watches a directory by listing it every watchEvery and
// sending what changed: the agent has no inotify of its own, and a
// listing sees the sandbox's writes whatever makes them.
func (s *Server) watchDir(ctx context.Context, rec *session.Record, body []byte, sw *streamWriter) *rpcError {
	var req struct {
		Path      string `json:"path"`
		Recursive bool   `json:"recursive"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Path == "" {
		return rpcErr("invalid_argument", "a path is expected")
	}
	sock := s.st.Sock(rec.ID)
	snap := func() (map[string]agent.FileInfo, error) {
		out := map[string]agent.FileInfo{}
		var walk func(dir, rel string) error
		walk = func(dir, rel string) error {
			list, err := agent.List(ctx, sock, dir)
			if err != nil {
				return err
			}
			for _, fi := range list {
				if len(out) >= maxListed {
					return errListed
				}
				name := path.Join(rel, fi.Name)
				out[name] = fi
				if req.Recursive && fi.Type == "dir" {
					if err := walk(path.Join(dir, fi.Name), name); err == errListed {
						return err
					}
				}
			}
			return nil
		}
		return out, walk(req.Path, "")
	}
	prev, err := snap()
	if err != nil {
		return fsError(err)
	}
	if sw.send(map[string]any{"start": struct{}{}}) != nil {
		return nil
	}
	type fsEvent struct {
		Name string `json:"name"`
		Type string `json:"type"`
	}
	send := func(name, typ string) error {
		return sw.send(map[string]any{"filesystem": fsEvent{Name: name, Type: typ}})
	}
	tick := time.NewTicker(watchEvery)
	defer tick.Stop()
	idle := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		cur, err := snap()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fsError(err)
		}
		names := make([]string, 0, len(cur))
		for n := range cur {
			names = append(names, n)
		}
		sort.Strings(names)
		sent := false
		for _, n := range names {
			old, ok := prev[n]
			c := cur[n]
			switch {
			case !ok:
				err = send(n, "EVENT_TYPE_CREATE")
				if err == nil && c.Type == "file" && c.Size > 0 {
					err = send(n, "EVENT_TYPE_WRITE")
				}
				sent = true
			case old.Size != c.Size || !old.Modified.Equal(c.Modified):
				err, sent = send(n, "EVENT_TYPE_WRITE"), true
			case old.Mode != c.Mode:
				err, sent = send(n, "EVENT_TYPE_CHMOD"), true
			}
		}
		for n := range prev {
			if _, ok := cur[n]; !ok && err == nil {
				err, sent = send(n, "EVENT_TYPE_REMOVE"), true
			}
		}
		if err != nil {
			return nil
		}
		prev = cur
		if idle++; sent {
			idle = 0
		} else if idle*int(watchEvery/time.Millisecond) >= 30000 {
			idle = 0
			if sw.send(map[string]any{"keepalive": struct{}{}}) != nil {
				return nil
			}
		}
	}
}

// watchEvery is how often WatchDir lists the directory.
const watchEvery = 200 * time.Millisecond

// e2bFiles serves envd's /files: GET downloads a file, POST uploads one
// or several (multipart, each part's file name the full destination) or
// one raw body to ?path=.
func (s *Server) e2bFiles(w http.ResponseWriter, r *http.Request, t string) {
	rec, rerr := s.envdSandbox(r, t)
	if rerr != nil {
		writeE2BError(w, http.StatusBadGateway, fault.SessionEnded, rerr.Message)
		return
	}
	sock := s.st.Sock(rec.ID)
	switch r.Method {
	case http.MethodGet:
		p := r.URL.Query().Get("path")
		if p == "" {
			writeE2BError(w, 400, fault.BadValue, "path is missing")
			return
		}
		started := false
		err := agent.ReadFile(r.Context(), sock, p, w, func(fi *agent.FileInfo) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", strconv.FormatInt(fi.Size, 10))
			started = true
		})
		if err != nil && !started {
			e := fsError(err)
			st := rpcStatus[e.Code]
			if e.Code == "not_found" {
				st = 404
			} else if st == 0 || st == 503 {
				st = 500
			}
			writeE2BError(w, st, fault.BadValue, e.Message)
		}
	case http.MethodPost:
		s.e2bUpload(w, r, sock)
	default:
		writeE2BError(w, http.StatusMethodNotAllowed, fault.BadValue, "GET or POST")
	}
}

// mkParent makes p's missing parent directories, as envd's write does.
func mkParent(ctx context.Context, sock, p string) {
	dir := path.Dir(p)
	if _, err := agent.Stat(ctx, sock, dir); errors.Is(err, fs.ErrNotExist) {
		run(ctx, sock, "mkdir", "-p", "--", dir)
	}
}

type writeInfo struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

func (s *Server) e2bUpload(w http.ResponseWriter, r *http.Request, sock string) {
	ctx := r.Context()
	body := io.Reader(http.MaxBytesReader(w, r.Body, s.cfg.MaxUpload))
	fail := func(err error) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeE2BError(w, http.StatusRequestEntityTooLarge, fault.BadValue, fmt.Sprintf("upload over %d bytes", s.cfg.MaxUpload))
			return
		}
		e := fsError(err)
		writeE2BError(w, 400, fault.BadValue, e.Message)
	}
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		p := r.URL.Query().Get("path")
		if p == "" {
			writeE2BError(w, 400, fault.BadValue, "path is missing")
			return
		}
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(body)
			if err != nil {
				writeE2BError(w, 400, fault.BadValue, "invalid gzip body")
				return
			}
			body = io.LimitReader(zr, s.cfg.MaxUpload+1)
		}
		mkParent(ctx, sock, p)
		if err := agent.WriteFile(ctx, sock, p, 0o644, body, s.cfg.MaxUpload); err != nil {
			fail(err)
			return
		}
		writeJSON(w, 200, []writeInfo{{Name: path.Base(p), Type: "file", Path: p}})
		return
	}
	mr := multipart.NewReader(bufio.NewReader(body), params["boundary"])
	out := []writeInfo{}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			fail(err)
			return
		}
		// Part.FileName keeps only the base name: the SDK's is the
		// whole destination path, read from the header itself.
		_, dp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
		p := dp["filename"]
		if p == "" {
			p = r.URL.Query().Get("path")
		}
		if p == "" {
			writeE2BError(w, 400, fault.BadValue, "a part names no file")
			return
		}
		mkParent(ctx, sock, p)
		if err := agent.WriteFile(ctx, sock, p, 0o644, part, s.cfg.MaxUpload); err != nil {
			fail(err)
			return
		}
		out = append(out, writeInfo{Name: path.Base(p), Type: "file", Path: p})
	}
	writeJSON(w, 200, out)
}
