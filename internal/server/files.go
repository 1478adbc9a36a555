package server

// The session file routes: read, write, remove, stat and list a path in
// the sandbox through its agent.

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strconv"

	"github.com/pinfold/pinfold/internal/agent"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/session"
)

// fileArgs is the running session and the path a file request names,
// with one answer when either is missing (not two bodies in one).
func (s *Server) fileArgs(w http.ResponseWriter, r *http.Request, t string) (*session.Record, string, bool) {
	rec := s.running(w, r, t)
	if rec == nil {
		return nil, "", false
	}
	p, ok := s.pathArg(w, r)
	return rec, p, ok
}

func (s *Server) pathArg(w http.ResponseWriter, r *http.Request) (string, bool) {
	p := r.URL.Query().Get("path")
	if p == "" {
		writeError(w, 400, fault.BadValue, "path is missing", "")
		return "", false
	}
	return p, true
}

func fileError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		writeError(w, http.StatusNotFound, fault.BadValue, err.Error(), "")
	case errors.Is(err, fs.ErrPermission):
		writeError(w, http.StatusForbidden, fault.BadValue, err.Error(), "")
	case errors.Is(err, agent.ErrTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, fault.BadValue, err.Error(), "")
	default:
		var oe *agent.OpError
		if errors.As(err, &oe) {
			writeError(w, http.StatusBadRequest, fault.BadValue, err.Error(), "")
			return
		}
		writeError(w, http.StatusInternalServerError, fault.API, err.Error(), "")
	}
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request, t string) {
	rec, p, ok := s.fileArgs(w, r, t)
	if !ok {
		return
	}
	started := false
	err := agent.ReadFile(r.Context(), s.st.Sock(rec.ID), p, w, func(fi *agent.FileInfo) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(fi.Size, 10))
		started = true
	})
	if err != nil && !started {
		fileError(w, err)
	}
}

func (s *Server) writeFile(w http.ResponseWriter, r *http.Request, t string) {
	rec, p, ok := s.fileArgs(w, r, t)
	if !ok {
		return
	}
	if r.ContentLength > s.cfg.MaxUpload {
		s.tooLarge(w, r, fmt.Sprintf("upload over %d bytes", s.cfg.MaxUpload))
		return
	}
	mode := uint64(0o644)
	if m := r.URL.Query().Get("mode"); m != "" {
		var err error
		if mode, err = strconv.ParseUint(m, 8, 32); err != nil || mode > 0o777 {
			writeError(w, 400, fault.BadValue, "invalid mode "+m, "give octal permissions, like 0644")
			return
		}
	}
	err := agent.WriteFile(r.Context(), s.st.Sock(rec.ID), p, uint32(mode), r.Body, s.cfg.MaxUpload)
	if err != nil {
		fileError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) removeFile(w http.ResponseWriter, r *http.Request, t string) {
	rec, p, ok := s.fileArgs(w, r, t)
	if !ok {
		return
	}
	if err := agent.Remove(r.Context(), s.st.Sock(rec.ID), p, r.URL.Query().Get("recursive") == "true"); err != nil {
		fileError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) statFile(w http.ResponseWriter, r *http.Request, t string) {
	rec, p, ok := s.fileArgs(w, r, t)
	if !ok {
		return
	}
	fi, err := agent.Stat(r.Context(), s.st.Sock(rec.ID), p)
	if err != nil {
		fileError(w, err)
		return
	}
	writeJSON(w, 200, fi)
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request, t string) {
	rec, p, ok := s.fileArgs(w, r, t)
	if !ok {
		return
	}
	list, err := agent.List(r.Context(), s.st.Sock(rec.ID), p)
	if err != nil {
		fileError(w, err)
		return
	}
	writeJSON(w, 200, list)
}
