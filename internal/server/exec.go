package server

// The one-shot exec route: a command run to its end, its output capped.

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pinfold/pinfold/internal/agent"
	"github.com/pinfold/pinfold/internal/fault"
)

// capped keeps at most max bytes.
type capped struct {
	b   []byte
	max int
	cut bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - len(c.b); room < len(p) {
		c.b = append(c.b, p[:max(room, 0)]...)
		c.cut = true
		return len(p), nil
	}
	c.b = append(c.b, p...)
	return len(p), nil
}

func (s *Server) execOnce(w http.ResponseWriter, r *http.Request, t string) {
	var x ExecRequest
	if !s.decode(w, r, &x) {
		return
	}
	rec := s.running(w, r, t)
	if rec == nil {
		return
	}
	if len(x.Args) == 0 {
		writeError(w, 400, fault.BadValue, "args is empty", "")
		return
	}
	ctx := r.Context()
	var timeout time.Duration
	if x.Timeout != "" {
		d, err := time.ParseDuration(x.Timeout)
		if err != nil || d <= 0 {
			writeError(w, 400, fault.BadValue, "invalid timeout "+x.Timeout, "")
			return
		}
		timeout = d
	}
	req := &agent.Request{Args: x.Args, Env: x.Env, Dir: x.Dir, Stdin: x.Stdin != ""}
	conn, err := agent.StartExec(ctx, s.st.Sock(rec.ID), req)
	if err != nil {
		writeFault(w, fault.New(fault.SessionEnded, "cannot reach sandbox "+rec.ID, err.Error(), "", err))
		return
	}
	defer conn.Close()
	// A client gone mid-exec hangs its command up, as a streamed exec's.
	defer context.AfterFunc(ctx, func() { conn.Close() })()
	if x.Stdin != "" {
		go func() {
			io.WriteString(conn.Stdin(), x.Stdin)
			conn.Stdin().Close()
		}()
	}
	var timedOut atomic.Bool
	if timeout > 0 {
		timer := time.AfterFunc(timeout, func() {
			timedOut.Store(true)
			conn.Signal(syscall.SIGKILL)
		})
		defer timer.Stop()
	}
	stdout, stderr := &capped{max: maxExecOutput}, &capped{max: maxExecOutput}
	e, err := conn.Wait(stdout, stderr, nil)
	if err != nil {
		writeFault(w, fault.New(fault.SessionEnded, "sandbox "+rec.ID+": "+err.Error(), "", "", err))
		return
	}
	res := ExecResult{ExitCode: e.Code, Signal: e.Signal, Stdout: string(stdout.b), Stderr: string(stderr.b),
		Truncated: stdout.cut || stderr.cut || e.Truncated, TimedOut: timedOut.Load(), Error: e.Error}
	writeJSON(w, 200, res)
}
