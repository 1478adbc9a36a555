package server

// envd's process service: Start, Connect, List, SendInput, SendSignal,
// Update and CloseStdin over the session's agent, with a table per
// sandbox that finds each process by pid (see e2b_envd.go).

import (
	"context"
	"encoding/json"
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
