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
	"strconv"
	"strings"
	"sync"
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
