package server

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/pinfold/pinfold/internal/agent"

	"github.com/coder/websocket"

	"github.com/pinfold/pinfold/internal/fault"
)

// execStream runs a command over a WebSocket. The client's first message
// is a JSON agent.Request (args, env, dir, tty, rows, cols, stdin);
// then every message is binary, its first byte a frame type of
// internal/session: the client sends stdin ('i'), end of stdin ('I'), a
// signal ('s', one byte) and a size ('r', rows and cols as big-endian
// uint16); the server sends the pid ('p'), output ('o', 'e') and, last,
// the exit ('x', JSON), then closes normally. A client that goes away
// hangs the command up; the server carries on.
func (s *Server) execStream(w http.ResponseWriter, r *http.Request, t string) {
	rec := s.running(w, r, t)
	if rec == nil {
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(1<<20 + 1)
	ctx := r.Context()
	first, cancel := contextWithTimeout(ctx, 30*time.Second)
	typ, msg, err := c.Read(first)
	cancel()
	if err != nil {
		return
	}
	var req agent.Request
	if typ != websocket.MessageText || json.Unmarshal(msg, &req) != nil || len(req.Args) == 0 {
		c.Close(websocket.StatusPolicyViolation, "the first message must be a JSON request with args")
		return
	}
	x, err := agent.StartExec(ctx, s.st.Sock(rec.ID), &req)
	if err != nil {
		b, _ := json.Marshal(agent.Exit{Code: 125, Error: string(fault.SessionEnded) + " cannot reach the sandbox: " + err.Error()})
		c.Write(ctx, websocket.MessageBinary, append([]byte{agent.FrameExit}, b...))
		c.Close(websocket.StatusNormalClosure, "")
		return
	}
	defer x.Close()
	go func() {
		for {
			typ, msg, err := c.Read(ctx)
			if err != nil {
				x.Close() // the agent hangs the command up
				return
			}
			if typ != websocket.MessageBinary || len(msg) == 0 {
				continue
			}
			if x.Send(msg[0], msg[1:]) != nil {
				return
			}
		}
	}()
	for {
		ft, b, err := x.Next()
		if err != nil {
			c.Close(websocket.StatusInternalError, "the sandbox ended during the command")
			return
		}
		// A client that stops reading is dropped (and its command hung up).
		wctx, cancel := contextWithTimeout(ctx, s.writeTimeout())
		err = c.Write(wctx, websocket.MessageBinary, append([]byte{ft}, b...))
		cancel()
		if err != nil {
			return
		}
		if ft == agent.FrameExit {
			c.Close(websocket.StatusNormalClosure, "")
			return
		}
	}
}
