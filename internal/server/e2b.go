package server

// The E2B protocol's control plane (docs/e2b.md): E2B's SDK, pointed at
// pinfold serve with E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY, creates,
// lists, pauses and kills pinfold sessions. The wire types are written
// here from the field names of ../shared/design/e2b-protocol.md; nothing
// of E2B's code is used. The sandbox plane is e2b_envd.go.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/session"
	"github.com/pinfold/pinfold/internal/units"
)

// e2bEnvdVersion is the envd version pinfold answers as: the SDK turns on
// the features of the versions up to it (recursive watch, closeStdin,
// octet-stream uploads) and refuses the later ones itself, with its own
// clear error (upload metadata, includeEntry, allowNetworkMounts).
const e2bEnvdVersion = "0.5.7"

// e2bDefaultTimeout is E2B's default lifetime of a sandbox (seconds).
const e2bDefaultTimeout = 300

// e2bMeta is what pinfold keeps of an E2B sandbox beside its session's
// record (STORE/sessions/ID/e2b.json, which the sandbox cannot reach).
type e2bMeta struct {
	TemplateID string            `json:"templateID"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	EndAt      time.Time         `json:"endAt"`
	// Access is the sandbox's envd access token: the SDK sends no API
	// key to the sandbox plane, only this (X-Access-Token), which create
	// and connect give it.
	Access string `json:"access"`
}

// e2bAccess authenticates a sandbox-plane request by its sandbox's access
// token and returns the sandbox's tenant.
func (s *Server) e2bAccess(r *http.Request) (string, bool) {
	id, tok := r.Header.Get("E2b-Sandbox-Id"), r.Header.Get("X-Access-Token")
	if tok == "" {
		return "", false
	}
	// A killed sandbox's token still opens its own plane, which answers
	// that it is not running (the SDK's isRunning asks): nothing more.
	rec, ok := s.e2bRecord(id)
	if !ok {
		return "", false
	}
	m, ok := s.e2bMeta(id)
	if !ok || m.Access == "" {
		return "", false
	}
	a, b := sha256.Sum256([]byte(m.Access)), sha256.Sum256([]byte(tok))
	if subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
		return "", false
	}
	return rec.Tenant, true
}

// e2bState is the server's state of the E2B sandboxes it serves.
type e2bState struct {
	once      sync.Once
	mu        sync.Mutex
	procs     map[string]*procTable // session id -> its processes
	done      chan struct{}         // closed by close: the reaper ends
	closeOnce sync.Once
}

func (e *e2bState) init() {
	e.mu.Lock()
	if e.done == nil {
		e.done = make(chan struct{})
	}
	e.mu.Unlock()
}

func (e *e2bState) close() {
	e.init()
	e.closeOnce.Do(func() { close(e.done) })
}

func (s *Server) e2bMetaPath(id string) string { return filepath.Join(s.st.Path(id), "e2b.json") }

func (s *Server) e2bMeta(id string) (*e2bMeta, bool) {
	b, err := os.ReadFile(s.e2bMetaPath(id))
	if err != nil {
		return nil, false
	}
	var m e2bMeta
	if json.Unmarshal(b, &m) != nil {
		return nil, false
	}
	return &m, true
}

func (s *Server) saveE2BMeta(id string, m *e2bMeta) error {
	b, _ := json.Marshal(m)
	tmp := s.e2bMetaPath(id) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.e2bMetaPath(id))
}

// isE2B says whether path is one of the E2B protocol's, which share no
// prefix with pinfold's own /v1.
// isEnvd tells the sandbox plane's paths (envd's: the files, the health
// check and the Connect RPCs), which name their sandbox by the
// E2b-Sandbox-Id header, from the control plane's.
func isEnvd(path string) bool {
	return path == "/health" || path == "/files" ||
		strings.HasPrefix(path, "/process.Process/") || strings.HasPrefix(path, "/filesystem.Filesystem/")
}

func isE2B(path string) bool {
	switch {
	case path == "/health", path == "/files",
		strings.HasPrefix(path, "/v2/sandboxes"), strings.HasPrefix(path, "/sandboxes"),
		strings.HasPrefix(path, "/snapshots"), strings.HasPrefix(path, "/templates"),
		strings.HasPrefix(path, "/process.Process/"), strings.HasPrefix(path, "/filesystem.Filesystem/"):
		return true
	}
	return false
}

// e2bError is the control plane's error body: E2B's {code, message},
// with pinfold's code beside them.
type e2bError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Pinfold string `json:"pinfoldCode,omitempty"`
}

func writeE2BError(w http.ResponseWriter, status int, code fault.Code, msg string) {
	writeJSON(w, status, e2bError{Code: status, Message: string(code) + ": " + msg, Pinfold: string(code)})
}

// e2bUnsupported answers what pinfold does not serve of E2B's protocol.
func e2bUnsupported(w http.ResponseWriter, what string) {
	writeE2BError(w, http.StatusNotImplemented, fault.E2BUnsupported, what+" is not supported by pinfold's E2B API (docs/e2b.md)")
}

// serveE2B serves an E2B request of tenant t.
func (s *Server) serveE2B(w http.ResponseWriter, r *http.Request, t string) {
	s.e2b.init()
	s.e2b.once.Do(func() { go s.e2bReaper() })
	p := r.URL.Path
	if strings.HasPrefix(p, "/process.Process/") || strings.HasPrefix(p, "/filesystem.Filesystem/") {
		s.e2bRPC(w, r, t)
		return
	}
	switch {
	case p == "/health":
		s.e2bHealth(w, r, t)
	case p == "/files":
		s.e2bFiles(w, r, t)
	case p == "/v2/sandboxes" && r.Method == http.MethodPost:
		s.e2bCreate(w, r, t)
	case p == "/v2/sandboxes" && r.Method == http.MethodGet, p == "/sandboxes" && r.Method == http.MethodGet:
		s.e2bList(w, r, t)
	default:
		rest, ok := strings.CutPrefix(p, "/v2/sandboxes/")
		if !ok {
			rest, ok = strings.CutPrefix(p, "/sandboxes/")
		}
		if !ok {
			e2bUnsupported(w, r.Method+" "+p)
			return
		}
		id, verb, _ := strings.Cut(rest, "/")
		switch {
		case verb == "" && r.Method == http.MethodGet:
			s.e2bInfo(w, r, t, id)
		case verb == "" && r.Method == http.MethodDelete:
			s.e2bKill(w, r, t, id)
		case verb == "connect" && r.Method == http.MethodPost, verb == "resume" && r.Method == http.MethodPost:
			s.e2bConnect(w, r, t, id)
		case verb == "timeout" && r.Method == http.MethodPost:
			s.e2bTimeout(w, r, t, id)
		case verb == "pause" && r.Method == http.MethodPost:
			s.e2bPause(w, r, t, id)
		case verb == "metrics" && r.Method == http.MethodGet:
			s.e2bMetrics(w, r, t, id)
		default:
			e2bUnsupported(w, r.Method+" /sandboxes/{id}/"+verb)
		}
	}
}

// e2bCreateRequest is the body of POST /v2/sandboxes. Fields pinfold
// cannot honour are read so that they are refused, not dropped.
type e2bCreateRequest struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             json.RawMessage   `json:"network"`
	AutoPause           *bool             `json:"autoPause"`
	AutoResume          json.RawMessage   `json:"autoResume"`
	VolumeMounts        json.RawMessage   `json:"volumeMounts"`
	MCP                 json.RawMessage   `json:"mcp"`
	IAM                 json.RawMessage   `json:"iam"`
}

func isSet(m json.RawMessage) bool { return len(m) > 0 && string(m) != "null" }

// e2bSandbox is a sandbox as create, connect, list and info describe it.
type e2bSandbox struct {
	SandboxID       string            `json:"sandboxID"`
	TemplateID      string            `json:"templateID"`
	ClientID        string            `json:"clientID"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	StartedAt       string            `json:"startedAt,omitempty"`
	EndAt           string            `json:"endAt,omitempty"`
	State           string            `json:"state,omitempty"`
	CPUCount        int               `json:"cpuCount,omitempty"`
	MemoryMB        int               `json:"memoryMB,omitempty"`
	DiskSizeMB      int               `json:"diskSizeMB,omitempty"`
	AllowInternet   *bool             `json:"allowInternetAccess,omitempty"`
	Lifecycle       *e2bLifecycle     `json:"lifecycle,omitempty"`
	PinfoldSession  string            `json:"pinfoldSession,omitempty"`
	PinfoldChangeID string            `json:"pinfoldChangeset,omitempty"`
}

type e2bLifecycle struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

func (s *Server) e2bCreate(w http.ResponseWriter, r *http.Request, t string) {
	var c e2bCreateRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody)).Decode(&c); err != nil {
		writeE2BError(w, 400, fault.BadValue, "invalid request body: "+err.Error())
		return
	}
	switch {
	case isSet(c.VolumeMounts):
		e2bUnsupported(w, "volumeMounts")
		return
	case isSet(c.Network), isSet(c.IAM), isSet(c.MCP):
		e2bUnsupported(w, "network, iam and mcp settings (the template's network policy applies)")
		return
	case c.AutoPause != nil && *c.AutoPause, isSet(c.AutoResume) && strings.Contains(string(c.AutoResume), "true"):
		e2bUnsupported(w, "pausing on timeout (autoPause, autoResume)")
		return
	case c.TemplateID == "":
		writeE2BError(w, 400, fault.BadValue, "templateID is missing")
		return
	}
	timeout := int64(e2bDefaultTimeout)
	if c.Timeout != nil {
		timeout = *c.Timeout
	}
	if timeout <= 0 {
		writeE2BError(w, 400, fault.BadValue, "timeout must be positive")
		return
	}
	cr := CreateRequest{Template: c.TemplateID}
	keys := make([]string, 0, len(c.EnvVars))
	for k := range c.EnvVars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		cr.Env = append(cr.Env, k+"="+c.EnvVars[k])
	}
	rec, status, e := s.startForE2B(r.Context(), cr, t)
	if rec == nil {
		writeJSON(w, status, e)
		return
	}
	var key [24]byte
	rand.Read(key[:])
	m := &e2bMeta{TemplateID: c.TemplateID, Metadata: c.Metadata, EndAt: time.Now().Add(time.Duration(timeout) * time.Second).UTC(),
		Access: hex.EncodeToString(key[:])}
	if err := s.saveE2BMeta(rec.ID, m); err != nil {
		session.Abort(context.WithoutCancel(r.Context()), s.st, rec, true)
		writeE2BError(w, 500, fault.Store, "cannot record the sandbox: "+err.Error())
		return
	}
	d := s.e2bDescribe(rec, m, false)
	d.EnvdAccessToken = m.Access
	writeJSON(w, http.StatusCreated, d)
}

// startForE2B starts a session as pinfold's own API's create does, by
// its handler, so that both are one path (the policy's grant, the
// tenant's workspace, session.Resolve and Spawn): the one place to change
// when session start changes. It returns the record, or the status and
// body of the E2B error.
func (s *Server) startForE2B(ctx context.Context, c CreateRequest, t string) (*session.Record, int, e2bError) {
	b, _ := json.Marshal(c)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "/v1/sandboxes", bytes.NewReader(b))
	rw := httptest.NewRecorder()
	s.create(rw, req, t)
	if rw.Code == http.StatusCreated {
		var rec session.Record
		if err := json.Unmarshal(rw.Body.Bytes(), &rec); err == nil {
			return &rec, 0, e2bError{}
		}
	}
	var e struct{ Error Error }
	json.Unmarshal(rw.Body.Bytes(), &e)
	msg := e.Error.Message
	if e.Error.Fix != "" {
		msg += " (" + e.Error.Fix + ")"
	}
	return nil, rw.Code, e2bError{Code: rw.Code, Message: e.Error.Code + ": " + msg, Pinfold: e.Error.Code}
}

// e2bDescribe is rec as E2B describes a sandbox.
func (s *Server) e2bDescribe(rec *session.Record, m *e2bMeta, full bool) e2bSandbox {
	out := e2bSandbox{SandboxID: rec.ID, ClientID: "pinfold", EnvdVersion: e2bEnvdVersion,
		PinfoldSession: rec.ID, PinfoldChangeID: rec.Changeset}
	if m != nil {
		out.TemplateID, out.Metadata = m.TemplateID, m.Metadata
		out.EndAt = m.EndAt.Format(time.RFC3339Nano)
	}
	if !full {
		return out
	}
	out.StartedAt = rec.Created.Format(time.RFC3339Nano)
	out.State = rec.State
	out.CPUCount, out.MemoryMB = s.e2bSize(out.TemplateID)
	no := false
	out.AllowInternet = &no
	if tp := s.cfg.Policy.Templates[out.TemplateID]; tp != nil && tp.Network != "" && tp.Network != "none" {
		yes := true
		out.AllowInternet = &yes
	}
	out.Lifecycle = &e2bLifecycle{OnTimeout: "kill"}
	return out
}

// e2bSize is the CPUs and memory (MiB) a template's sandbox may use.
func (s *Server) e2bSize(template string) (int, int) {
	cpus, mem := string(DefaultLimits.CPUs), string(DefaultLimits.Memory)
	if l := s.cfg.Policy.Limits; l.CPUs != "" {
		cpus = string(l.CPUs)
	}
	if l := s.cfg.Policy.Limits; l.Memory != "" {
		mem = string(l.Memory)
	}
	if tp := s.cfg.Policy.Templates[template]; tp != nil {
		if tp.Limits.CPUs != "" {
			cpus = string(tp.Limits.CPUs)
		}
		if tp.Limits.Memory != "" {
			mem = string(tp.Limits.Memory)
		}
	}
	n := runtime.NumCPU()
	if f, err := strconv.ParseFloat(cpus, 64); err == nil && f > 0 {
		n = max(1, int(f+0.999))
	}
	mb := 0
	if b, err := units.ParseSize(mem); err == nil {
		mb = int(b >> 20)
	}
	return n, mb
}

// e2bRecord reads the record of session id as the store keeps it, for
// the sandbox plane, which names a sandbox on every request: one file
// read, not a listing of every session.
func (s *Server) e2bRecord(id string) (*session.Record, bool) {
	if len(id) != 12 || strings.Trim(id, "0123456789abcdef") != "" {
		return nil, false
	}
	b, err := os.ReadFile(filepath.Join(s.st.Path(id), "session.json"))
	if err != nil {
		return nil, false
	}
	var rec session.Record
	if json.Unmarshal(b, &rec) != nil || rec.ID != id {
		return nil, false
	}
	return &rec, true
}

// e2bSession is the tenant's session id (404 for another tenant's).
func (s *Server) e2bSession(w http.ResponseWriter, t, id string) *session.Record {
	rec, err := s.st.Get(id, t)
	if err != nil || rec.ID != id {
		writeE2BError(w, http.StatusNotFound, fault.SessionNotFound, "sandbox "+id+" not found")
		return nil
	}
	return rec
}

func (s *Server) e2bList(w http.ResponseWriter, r *http.Request, t string) {
	q := r.URL.Query()
	list, err := s.st.List(t)
	if err != nil {
		writeE2BError(w, 500, fault.Store, "cannot read the sessions: "+err.Error())
		return
	}
	want := map[string]string{}
	if mq := q.Get("metadata"); mq != "" {
		vals, err := url.ParseQuery(mq)
		if err != nil {
			writeE2BError(w, 400, fault.BadValue, "invalid metadata filter")
			return
		}
		for k, v := range vals {
			want[k] = v[0]
		}
	}
	states := []string{session.StateRunning, session.StatePaused}
	if st := q["state"]; len(st) > 0 {
		states = strings.Split(strings.Join(st, ","), ",")
	}
	out := []e2bSandbox{}
	sort.Slice(list, func(i, j int) bool {
		if !list[i].Created.Equal(list[j].Created) {
			return list[i].Created.After(list[j].Created)
		}
		return list[i].ID < list[j].ID
	})
	for _, rec := range list {
		if !slices.Contains(states, rec.State) {
			continue
		}
		m, _ := s.e2bMeta(rec.ID)
		if tmpl := q.Get("template"); tmpl != "" && (m == nil || m.TemplateID != tmpl) {
			continue
		}
		ok := true
		for k, v := range want {
			if m == nil || m.Metadata[k] != v {
				ok = false
			}
		}
		if ok {
			out = append(out, s.e2bDescribe(rec, m, true))
		}
	}
	// The next token is the offset into this order.
	from := 0
	if nt := q.Get("nextToken"); nt != "" {
		if from, err = strconv.Atoi(nt); err != nil || from < 0 {
			writeE2BError(w, 400, fault.BadValue, "invalid nextToken")
			return
		}
		from = min(from, len(out))
	}
	out = out[from:]
	if l, err := strconv.Atoi(q.Get("limit")); err == nil && l > 0 && l < len(out) {
		out = out[:l]
		w.Header().Set("X-Next-Token", strconv.Itoa(from+l))
	}
	writeJSON(w, 200, out)
}

func (s *Server) e2bInfo(w http.ResponseWriter, r *http.Request, t, id string) {
	rec := s.e2bSession(w, t, id)
	if rec == nil {
		return
	}
	if !rec.Live() {
		writeE2BError(w, http.StatusNotFound, fault.SessionEnded, "sandbox "+id+" is "+rec.State)
		return
	}
	m, _ := s.e2bMeta(id)
	writeJSON(w, 200, s.e2bDescribe(rec, m, true))
}

// e2bHealth is envd's /health for the sandbox the header names: 204
// while it runs, 502 (E2B's "not running") otherwise.
func (s *Server) e2bHealth(w http.ResponseWriter, r *http.Request, t string) {
	id := r.Header.Get("E2b-Sandbox-Id")
	if rec, ok := s.e2bRecord(id); ok && rec.Tenant == t && rec.State == session.StateRunning {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeE2BError(w, http.StatusBadGateway, fault.SessionEnded, fmt.Sprintf("sandbox %q is not running", id))
}
