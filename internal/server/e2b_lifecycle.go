package server

// The E2B control plane after create: kill, timeout and its reaper,
// pause, connect (resume) and metrics.

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/session"
)

// e2bKill stops the sandbox. Its session's changeset stays for review
// (pinfold changes, diff, apply, discard) when the sandbox wrote
// something; otherwise nothing of it is left.
func (s *Server) e2bKill(w http.ResponseWriter, r *http.Request, t, id string) {
	rec := s.e2bSession(w, t, id)
	if rec == nil {
		return
	}
	if !rec.Live() {
		writeE2BError(w, http.StatusNotFound, fault.SessionEnded, "sandbox "+id+" is "+rec.State)
		return
	}
	if err := s.e2bEnd(context.WithoutCancel(r.Context()), rec, t); err != nil {
		writeE2BError(w, 500, fault.SessionRefused, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) e2bEnd(ctx context.Context, rec *session.Record, t string) error {
	s.closePorts(rec.ID)
	s.dropProcs(rec.ID)
	rec, err := session.Stop(ctx, s.st, rec, 5*time.Second)
	if err != nil {
		return err
	}
	if rec.Changeset == "" {
		// The record says stopped a moment before its supervisor has
		// written its last (the record's final save): a removal that
		// meets a file made meanwhile is tried again.
		for i := 0; ; i++ {
			if err = s.st.Remove(rec); err == nil {
				break
			}
			if i == 20 {
				return err
			}
			time.Sleep(50 * time.Millisecond)
		}
		if t != "" {
			s.dropTenantWorkspace(ctx, rec, t)
		}
	}
	return nil
}

// e2bReaper kills the E2B sandboxes whose timeout passed, as E2B does.
// It reads the records, so it survives the server's restarts.
func (s *Server) e2bReaper() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.e2b.done:
			return
		case <-t.C:
		}
		ents, _ := os.ReadDir(s.st.Dir)
		for _, e := range ents {
			m, ok := s.e2bMeta(e.Name())
			if !ok || time.Now().Before(m.EndAt) {
				continue
			}
			if rec, ok := s.e2bRecord(e.Name()); ok && rec.Live() {
				s.e2bEnd(context.Background(), rec, rec.Tenant)
			} else if ok {
				os.Remove(s.e2bMetaPath(e.Name()))
			}
		}
	}
}

type e2bTimeoutRequest struct {
	Timeout int64 `json:"timeout"`
}

// extend sets the sandbox's end to timeout seconds from now.
func (s *Server) extend(id string, timeout int64) {
	m, ok := s.e2bMeta(id)
	if !ok {
		m = &e2bMeta{}
	}
	m.EndAt = time.Now().Add(time.Duration(timeout) * time.Second).UTC()
	s.saveE2BMeta(id, m)
}

func (s *Server) e2bTimeout(w http.ResponseWriter, r *http.Request, t, id string) {
	var req e2bTimeoutRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody)).Decode(&req); err != nil || req.Timeout <= 0 {
		writeE2BError(w, 400, fault.BadValue, "want {\"timeout\": SECONDS}")
		return
	}
	rec := s.e2bSession(w, t, id)
	if rec == nil {
		return
	}
	if !rec.Live() {
		writeE2BError(w, http.StatusNotFound, fault.SessionEnded, "sandbox "+id+" is "+rec.State)
		return
	}
	s.extend(id, req.Timeout)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) e2bPause(w http.ResponseWriter, r *http.Request, t, id string) {
	rec := s.e2bSession(w, t, id)
	if rec == nil {
		return
	}
	switch rec.State {
	case session.StatePaused:
		writeE2BError(w, http.StatusConflict, fault.SessionEnded, "sandbox "+id+" is paused already")
		return
	case session.StateRunning:
	default:
		writeE2BError(w, http.StatusNotFound, fault.SessionEnded, "sandbox "+id+" is "+rec.State)
		return
	}
	if _, err := session.Pause(s.st, rec); err != nil {
		writeE2BError(w, http.StatusBadRequest, fault.SessionRefused, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// e2bConnect resumes a paused sandbox and sets its timeout.
func (s *Server) e2bConnect(w http.ResponseWriter, r *http.Request, t, id string) {
	var req struct {
		Timeout *int64 `json:"timeout"`
	}
	json.NewDecoder(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody)).Decode(&req)
	rec := s.e2bSession(w, t, id)
	if rec == nil {
		return
	}
	status := http.StatusOK
	switch rec.State {
	case session.StatePaused:
		var err error
		if rec, err = session.Resume(s.st, rec); err != nil {
			writeE2BError(w, http.StatusBadRequest, fault.SessionRefused, err.Error())
			return
		}
		status = http.StatusCreated
	case session.StateRunning:
	default:
		writeE2BError(w, http.StatusNotFound, fault.SessionEnded, "sandbox "+id+" is "+rec.State)
		return
	}
	timeout := int64(e2bDefaultTimeout)
	if req.Timeout != nil && *req.Timeout > 0 {
		timeout = *req.Timeout
	}
	s.extend(id, timeout)
	m, _ := s.e2bMeta(id)
	d := s.e2bDescribe(rec, m, false)
	d.EnvdAccessToken = m.Access
	writeJSON(w, status, d)
}

// e2bMetric is one sample of getMetrics.
type e2bMetric struct {
	Timestamp  string  `json:"timestamp"`
	TimestampU int64   `json:"timestampUnix"`
	CPUUsedPct float64 `json:"cpuUsedPct"`
	CPUCount   int     `json:"cpuCount"`
	MemUsed    int64   `json:"memUsed"`
	MemTotal   int64   `json:"memTotal"`
	MemCache   int64   `json:"memCache"`
	DiskUsed   int64   `json:"diskUsed"`
	DiskTotal  int64   `json:"diskTotal"`
}

// e2bMetrics answers one sample, now: memory from the session's cgroup
// where it has one (pinfold keeps no history of samples).
func (s *Server) e2bMetrics(w http.ResponseWriter, r *http.Request, t, id string) {
	rec := s.e2bSession(w, t, id)
	if rec == nil {
		return
	}
	if !rec.Live() {
		writeE2BError(w, http.StatusNotFound, fault.SessionEnded, "sandbox "+id+" is "+rec.State)
		return
	}
	m, _ := s.e2bMeta(id)
	tmpl := ""
	if m != nil {
		tmpl = m.TemplateID
	}
	cpus, mb := s.e2bSize(tmpl)
	now := time.Now().UTC()
	sample := e2bMetric{Timestamp: now.Format(time.RFC3339), TimestampU: now.Unix(), CPUCount: cpus, MemTotal: int64(mb) << 20}
	if rec.Freezer != "" && rec.FreezerV2 {
		if b, err := os.ReadFile(filepath.Join(rec.Freezer, "memory.current")); err == nil {
			sample.MemUsed, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		}
	}
	writeJSON(w, 200, []e2bMetric{sample})
}
