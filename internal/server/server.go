// Package server is pinfold's HTTP API (pinfold serve): sessions of the
// engine for agent platforms, on an owner-only unix socket, or on TCP with
// bearer tokens, each token a tenant that sees only its own sessions. It
// runs in the pinfold-api helper binary, so that net/http and the
// WebSocket library are never part of pinfold's own start-up.
//
// Every verb is a route of Routes; api/openapi.yaml describes them and a
// test checks the two agree. Streaming exec is a WebSocket (see
// docs/api.md for why): one JSON text message with the command, then
// binary messages whose first byte is the frame type of the session
// agent's protocol (internal/session).
package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pinfold/pinfold/client"
	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/serveconf"
	"github.com/pinfold/pinfold/internal/session"
)

// Config is what a server serves.
type Config struct {
	// Store is pinfold's store directory.
	Store string
	// Pinfold is the pinfold binary that supervises sessions.
	Pinfold string
	// Version is reported by /v1/health.
	Version string
	// Tokens maps bearer tokens to tenants, for TCP listeners.
	Tokens map[string]string
	// MaxBody bounds JSON request bodies; MaxUpload file uploads.
	MaxBody, MaxUpload int64
	// Engine makes the engine a request uses (nil: engine.New(Store)).
	Engine func() *engine.Engine
	// Tenants holds the tenants' workspaces (TENANT/ws-...); empty:
	// TenantsDir(Store). Not inside the store, which no sandbox may see.
	Tenants string
	// Policy is what tenants may ask for (nil: DefaultPolicy()).
	Policy *Policy
	// Log receives a line for every tenant request the policy refused
	// (nil: os.Stderr).
	Log io.Writer
}

// TenantsDir is the default directory of the tenants' workspaces for the
// store at dir: beside it ("/var/lib/pinfold-tenants").
func TenantsDir(store string) string { return filepath.Clean(store) + "-tenants" }

// Defaults for Config's bounds.
const (
	DefaultMaxBody   = serveconf.DefaultMaxBody
	DefaultMaxUpload = serveconf.DefaultMaxUpload
	maxExecOutput    = 8 << 20
)

// Server serves the API.
type Server struct {
	cfg   Config
	st    *session.Store
	mux   *http.ServeMux
	mu    sync.Mutex
	ports map[string]map[int]net.Listener // session id -> sandbox port
	lim   Bounds                          // ServeLimited's
	e2b   e2bState                        // the E2B protocol's (e2b.go)
}

// The request and answer bodies are the client package's, so that the
// two ends cannot drift apart.
type (
	CreateRequest = client.CreateRequest
	ExecRequest   = client.ExecRequest
	ExecResult    = client.ExecResult
	Port          = client.Port
)

// Route is one verb of the API.
type Route struct {
	Method, Path string
	handler      func(s *Server, w http.ResponseWriter, r *http.Request, t string)
}

// Routes lists the API's verbs, as api/openapi.yaml names them.
func Routes() []Route {
	return []Route{
		{"GET", "/v1/health", (*Server).health},
		{"GET", "/v1/sandboxes", (*Server).list},
		{"POST", "/v1/sandboxes", (*Server).create},
		{"GET", "/v1/sandboxes/{id}", (*Server).get},
		{"DELETE", "/v1/sandboxes/{id}", (*Server).delete},
		{"POST", "/v1/sandboxes/{id}/exec", (*Server).execOnce},
		{"GET", "/v1/sandboxes/{id}/exec/stream", (*Server).execStream},
		{"GET", "/v1/sandboxes/{id}/files", (*Server).readFile},
		{"PUT", "/v1/sandboxes/{id}/files", (*Server).writeFile},
		{"DELETE", "/v1/sandboxes/{id}/files", (*Server).removeFile},
		{"GET", "/v1/sandboxes/{id}/files/stat", (*Server).statFile},
		{"GET", "/v1/sandboxes/{id}/files/list", (*Server).listFiles},
		{"GET", "/v1/sandboxes/{id}/changeset", (*Server).diff},
		{"POST", "/v1/sandboxes/{id}/changeset/apply", (*Server).apply},
		{"POST", "/v1/sandboxes/{id}/changeset/discard", (*Server).discard},
		{"GET", "/v1/sandboxes/{id}/ports", (*Server).listPorts},
		{"POST", "/v1/sandboxes/{id}/ports", (*Server).publish},
		{"DELETE", "/v1/sandboxes/{id}/ports/{port}", (*Server).unpublish},
		{"POST", "/v1/sandboxes/{id}/pause", (*Server).pause},
		{"POST", "/v1/sandboxes/{id}/resume", (*Server).resume},
		{"POST", "/v1/sandboxes/{id}/snapshot", (*Server).snapshot},
		{"GET", "/v1/sandboxes/{id}/logs", (*Server).logs},
	}
}

// New makes a server; it marks the sessions whose supervisor died while
// no server ran as lost (and cleans what they left).
func New(cfg Config) *Server {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.MaxUpload <= 0 {
		cfg.MaxUpload = DefaultMaxUpload
	}
	if cfg.Policy == nil {
		cfg.Policy = DefaultPolicy()
	}
	if cfg.Log == nil {
		cfg.Log = os.Stderr
	}
	s := &Server{cfg: cfg, st: session.Open(cfg.Store), mux: http.NewServeMux(), ports: map[string]map[int]net.Listener{}}
	s.st.CheckAll()
	for _, rt := range Routes() {
		h := rt.handler
		s.mux.HandleFunc(rt.Method+" "+rt.Path, func(w http.ResponseWriter, r *http.Request) {
			t, ok := r.Context().Value(tenantKey{}).(string)
			if !ok {
				writeError(w, http.StatusUnauthorized, fault.APIAuth, "unauthorized", "send Authorization: Bearer TOKEN")
				return
			}
			h(s, w, r, t)
		})
	}
	return s
}

type tenantKey struct{}
type connKey struct{}

// connInfo is what the listener says about a connection.
type connInfo struct {
	unix  bool
	uid   int
	uidOK bool
}

// ConnContext records a connection's kind and, on a unix socket, its
// peer's uid; set it as http.Server.ConnContext.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	ci := &connInfo{}
	if uc, ok := c.(*net.UnixConn); ok {
		ci.unix = true
		if raw, err := uc.SyscallConn(); err == nil {
			raw.Control(func(fd uintptr) {
				if cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED); err == nil {
					ci.uid, ci.uidOK = int(cred.Uid), true
				}
			})
		}
	}
	return context.WithValue(ctx, connKey{}, ci)
}

// ServeHTTP authenticates the request, then serves it. A unix socket's
// peer must be the server's user (or root): it is the owner, tenant "".
// On TCP, a bearer token names the tenant; nothing is served without one.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ci, _ := r.Context().Value(connKey{}).(*connInfo)
	tenant, ok := "", false
	switch {
	case ci == nil:
	case ci.unix:
		ok = ci.uidOK && (ci.uid == os.Getuid() || ci.uid == 0)
	default:
		tenant, ok = s.token(r.Header.Get("Authorization"))
		if k := r.Header.Get("X-API-KEY"); !ok && k != "" && isE2B(r.URL.Path) {
			tenant, ok = s.token("Bearer " + k) // E2B's SDK sends its key so
		}
		if !ok && isEnvd(r.URL.Path) {
			// A sandbox's token opens that sandbox's own plane, never
			// the tenant's control plane.
			tenant, ok = s.e2bAccess(r)
		}
	}
	if !ok && isE2B(r.URL.Path) {
		w.Header().Set("Connection", "close")
		writeE2BError(w, http.StatusUnauthorized, fault.APIAuth, "unauthorized: send the tenant's token as E2B_API_KEY")
		return
	}
	if !ok {
		// Nothing of a stranger's body is read, not even to keep the
		// connection: it is closed after the answer.
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusUnauthorized, fault.APIAuth, "unauthorized", "send Authorization: Bearer TOKEN")
		return
	}
	if isE2B(r.URL.Path) {
		s.serveE2B(w, r, tenant)
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant))
	s.mux.ServeHTTP(w, r)
}

func (s *Server) token(h string) (string, bool) {
	tok, found := strings.CutPrefix(h, "Bearer ")
	if !found || tok == "" {
		return "", false
	}
	tenant, ok := "", false
	// Hashes of one size are compared: ConstantTimeCompare returns at
	// once when the lengths differ, which would tell a token's length.
	sum := sha256.Sum256([]byte(tok))
	for t, ten := range s.cfg.Tokens {
		// Every token is compared, in constant time, whatever matches.
		ts := sha256.Sum256([]byte(t))
		if tokenEqual(ts[:], sum[:]) == 1 {
			tenant, ok = ten, true
		}
	}
	return tenant, ok
}

// tokenEqual compares tokens' hashes (a variable for a test to watch).
var tokenEqual = subtle.ConstantTimeCompare

// Error is the body of every failed request.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

func writeError(w http.ResponseWriter, status int, code fault.Code, msg, fix string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]Error{"error": {Code: string(code), Message: msg, Fix: fix}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// writeFault answers with err: a *fault.Error's code, else an internal error.
func writeFault(w http.ResponseWriter, err error) {
	var fe *fault.Error
	if !errors.As(err, &fe) {
		writeError(w, http.StatusInternalServerError, fault.Internal, err.Error(), "")
		return
	}
	status := http.StatusBadRequest
	switch fe.Code {
	case fault.SessionNotFound, fault.NoChangeset:
		status = http.StatusNotFound
	case fault.NotGranted:
		status = http.StatusForbidden
	case fault.SessionEnded, fault.Busy, fault.Conflict, fault.EarlierBoot:
		status = http.StatusConflict
	case fault.PolicyChange:
		status = http.StatusForbidden
	case fault.Internal, fault.Store, fault.API:
		status = http.StatusInternalServerError
	}
	msg := fe.What
	if fe.Why != "" {
		msg += ": " + fe.Why
	}
	writeError(w, status, fe.Code, msg, fe.Fix)
}

// tooLargeDiscard is the least tooLarge reads of a body it refuses.
const tooLargeDiscard = 64 << 20

// tooLarge answers 413 to a request whose body is over its bound. A
// client that sends its whole body before it reads the answer (Python's
// http.client, curl without Expect) would see a broken pipe if the
// connection closed under it: so a bounded amount of the body is read and
// thrown away first, and the connection is closed after the answer.
func (s *Server) tooLarge(w http.ResponseWriter, r *http.Request, msg string) {
	io.CopyN(io.Discard, r.Body, max(2*s.cfg.MaxUpload, tooLargeDiscard))
	w.Header().Set("Connection", "close")
	writeError(w, http.StatusRequestEntityTooLarge, fault.BadValue, msg, "")
}

// decode reads a bounded JSON body into v.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.tooLarge(w, r, fmt.Sprintf("request body over %d bytes", s.cfg.MaxBody))
			return false
		}
		writeError(w, http.StatusBadRequest, fault.BadValue, "invalid request body: "+err.Error(), "")
		return false
	}
	// Read to the end (within the bound): only then does net/http watch
	// for the client going away, which ends the request's context.
	io.Copy(io.Discard, body)
	return true
}

// session finds the request's session of tenant t: 404 for another
// tenant's, as for none.
func (s *Server) session(w http.ResponseWriter, r *http.Request, t string) *session.Record {
	rec, err := s.st.Get(r.PathValue("id"), t)
	if err != nil {
		writeError(w, http.StatusNotFound, fault.SessionNotFound, "no sandbox "+r.PathValue("id"), "")
		return nil
	}
	return rec
}

// running is session for a running one (409 otherwise).
func (s *Server) running(w http.ResponseWriter, r *http.Request, t string) *session.Record {
	rec := s.session(w, r, t)
	if rec != nil && rec.State != session.StateRunning {
		writeError(w, http.StatusConflict, fault.SessionEnded, "sandbox "+rec.ID+" is "+rec.State, "")
		return nil
	}
	return rec
}

func (s *Server) engine() *engine.Engine {
	if s.cfg.Engine != nil {
		return s.cfg.Engine()
	}
	e := engine.New(s.cfg.Store)
	e.Version = s.cfg.Version
	return e
}

func (s *Server) health(w http.ResponseWriter, r *http.Request, t string) {
	list, _ := s.st.List(t)
	n := 0
	for _, rec := range list {
		if rec.Live() {
			n++
		}
	}
	writeJSON(w, 200, map[string]any{"status": "ok", "version": s.cfg.Version, "sandboxes": n})
}

func (s *Server) list(w http.ResponseWriter, r *http.Request, t string) {
	list, err := s.st.List(t)
	if err != nil {
		writeFault(w, fault.New(fault.Store, "cannot read the sessions", err.Error(), "", err))
		return
	}
	all := r.URL.Query().Get("all") == "true"
	out := []*session.Record{}
	for _, rec := range list {
		if all || rec.Live() {
			out = append(out, rec)
		}
	}
	writeJSON(w, 200, out)
}

func (s *Server) create(w http.ResponseWriter, r *http.Request, t string) {
	var c CreateRequest
	if !s.decode(w, r, &c) {
		return
	}
	var g *grant
	if t != "" {
		// A tenant picks only among what the operator grants.
		gc, gr, err := s.cfg.Policy.grantRequest(c)
		if err != nil {
			s.refused(w, t, err)
			return
		}
		c, g = gc, &gr
	} else if c.Template != "" {
		writeError(w, 400, fault.BadValue, "templates are for tenants", "give the settings themselves")
		return
	}
	req := &session.StartRequest{Name: c.Name, Tenant: t, Cwd: c.Workspace}
	f := &req.Flags
	f.Workspace, f.Workdir, f.Base, f.Access, f.Backend, f.Network = c.Workspace, c.Workdir, c.Base, c.Access, c.Backend, c.Network
	f.Allow, f.Deny, f.DNS, f.Env, f.Mounts = c.Allow, c.Deny, c.DNS, c.Env, c.Mounts
	f.User, f.Hostname, f.Memory, f.Pids, f.CPUs, f.Timeout, f.TmpSize = c.User, c.Hostname, c.Memory, c.Pids, c.CPUs, c.Timeout, c.TmpSize
	if c.IdleTimeout != "" {
		d, err := time.ParseDuration(c.IdleTimeout)
		if err != nil || d < 0 {
			writeError(w, 400, fault.BadValue, "invalid idle_timeout "+c.IdleTimeout, "use a duration like 30m")
			return
		}
		req.Idle = d
	}
	fresh := "" // a tenant's new workspace, removed if no session starts in it
	if t != "" {
		// A tenant reaches nothing of the host: a workspace of its own
		// beside the store (grantRequest refused host paths).
		ws, err := s.tenantWorkspace(t, c.Snapshot)
		if err != nil {
			var fe *fault.Error
			if !errors.As(err, &fe) {
				err = fault.New(fault.Store, "cannot make the workspace", err.Error(), "", err)
			}
			writeFault(w, err)
			return
		}
		req.Cwd, f.Workspace = ws, ws
		if c.Snapshot == "" {
			fresh = ws
		}
	} else if c.Workspace == "" || !filepath.IsAbs(c.Workspace) {
		writeError(w, 400, fault.BadValue, "workspace must be an absolute path", "")
		return
	}
	o := session.StartOptions{Snapshot: c.Snapshot, Exe: s.cfg.Pinfold}
	if g != nil {
		o.Check = g.checkPlan
	}
	// Refused plans are refused here, with the run's messages and codes.
	rec, err := session.Start(context.WithoutCancel(r.Context()), s.engine(), s.st, req, o)
	if err != nil {
		if fresh != "" {
			os.Remove(fresh) // left only if empty: nothing ran in it
		}
		s.refused(w, t, err)
		return
	}
	writeJSON(w, http.StatusCreated, rec)
}

// refused answers err; a refusal of the policy is logged with its tenant.
func (s *Server) refused(w http.ResponseWriter, t string, err error) {
	var fe *fault.Error
	if errors.As(err, &fe) && fe.Code == fault.NotGranted {
		fmt.Fprintf(s.cfg.Log, "pinfold: tenant %s refused: %s %s\n", t, fe.Code, fe.What)
	}
	writeFault(w, err)
}

// tenantWorkspace makes a fresh workspace for a tenant's session, or
// reuses the one a snapshot of the tenant's was taken in.
func (s *Server) tenantWorkspace(t, snapshot string) (string, error) {
	if snapshot != "" {
		snap, err := session.OpenSnapshot(s.st, snapshot, t)
		if err != nil {
			return "", err
		}
		return snap.Workspace, nil
	}
	for _, c := range t {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return "", errors.New("invalid tenant name")
		}
	}
	root := s.cfg.Tenants
	if root == "" {
		root = TenantsDir(s.cfg.Store)
	}
	dir := filepath.Join(root, t)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	return os.MkdirTemp(dir, "ws-")
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, t string) {
	if rec := s.session(w, r, t); rec != nil {
		writeJSON(w, 200, rec)
	}
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request, t string) {
	rec := s.session(w, r, t)
	if rec == nil {
		return
	}
	s.closePorts(rec.ID)
	rec, err := session.Stop(r.Context(), s.st, rec, 10*time.Second)
	if err != nil {
		writeFault(w, err)
		return
	}
	if r.URL.Query().Get("remove") == "true" {
		if err := s.st.Remove(rec); err != nil {
			writeFault(w, fault.New(fault.Store, "cannot remove "+rec.ID, err.Error(), "", err))
			return
		}
		if t != "" {
			s.dropTenantWorkspace(r.Context(), rec, t)
		}
	}
	writeJSON(w, 200, rec)
}

// dropTenantWorkspace removes what a removed tenant session leaves that
// nothing can reach any more: its open changeset, and the workspace the
// server made for it, unless another session or a snapshot of the
// tenant's still uses that workspace.
func (s *Server) dropTenantWorkspace(ctx context.Context, rec *session.Record, t string) {
	if rec.Changeset != "" {
		s.engine().DiscardChangeset(ctx, rec.Changeset)
	}
	root := s.cfg.Tenants
	if root == "" {
		root = TenantsDir(s.cfg.Store)
	}
	ws := filepath.Clean(rec.Workspace)
	if filepath.Dir(ws) != filepath.Join(root, t) || !strings.HasPrefix(filepath.Base(ws), "ws-") {
		return
	}
	list, err := s.st.List(t)
	if err != nil {
		return
	}
	for _, o := range list {
		if filepath.Clean(o.Workspace) == ws {
			return
		}
	}
	snaps, err := session.Snapshots(s.st, t)
	if err != nil {
		return
	}
	for _, sn := range snaps {
		if filepath.Clean(sn.Workspace) == ws {
			return
		}
	}
	os.RemoveAll(ws)
}

func (s *Server) logs(w http.ResponseWriter, r *http.Request, t string) {
	rec := s.session(w, r, t)
	if rec == nil {
		return
	}
	f, err := os.Open(s.st.LogPath(rec.ID))
	if err != nil {
		writeFault(w, fault.New(fault.Store, "cannot read the log", err.Error(), "", err))
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.Copy(w, f)
}

// Close closes the published ports. Sessions keep running: they outlive
// the server (their supervisors are processes of their own).
func (s *Server) Close() {
	s.e2b.close()
	s.mu.Lock()
	ids := make([]string, 0, len(s.ports))
	for id := range s.ports {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.closePorts(id)
	}
}
