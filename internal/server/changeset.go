package server

import (
	"context"
	"net/http"
	"time"

	"github.com/pinfold/pinfold/internal/changeset"
	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/session"
)

func contextWithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// changesetOf opens the session's changeset.
func (s *Server) changesetOf(w http.ResponseWriter, rec *session.Record) (*engine.Engine, *changeset.Changeset) {
	if rec.Changeset == "" {
		writeError(w, http.StatusNotFound, fault.NoChangeset, "sandbox "+rec.ID+" has no changeset", "its access is not changeset, or it wrote nothing")
		return nil, nil
	}
	eng := s.engine()
	cs, err := changeset.Open(s.cfg.Store, rec.Changeset)
	if err != nil {
		writeError(w, http.StatusNotFound, fault.NoChangeset, "no changeset "+rec.Changeset, "it was applied or discarded")
		return nil, nil
	}
	return eng, cs
}

// diff shows the changeset at any time: a unified diff, or with
// format=json|stat|name-status, those.
func (s *Server) diff(w http.ResponseWriter, r *http.Request, t string) {
	rec := s.session(w, r, t)
	if rec == nil {
		return
	}
	_, cs := s.changesetOf(w, rec)
	if cs == nil {
		return
	}
	roots := cs.Roots()
	entries, err := changeset.Scan(r.Context(), roots)
	if err != nil {
		writeFault(w, fault.New(fault.Store, "cannot read changeset "+cs.Meta.ID, err.Error(), "", err))
		return
	}
	o := changeset.DiffOptions{}
	switch r.URL.Query().Get("format") {
	case "json":
		w.Header().Set("Content-Type", "application/json")
		err = changeset.WriteJSON(w, roots, entries, o)
	case "stat":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		err = changeset.WriteStat(w, roots, entries, o)
	case "name-status":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		err = changeset.WriteNameStatus(w, roots, entries, o)
	case "", "diff":
		w.Header().Set("Content-Type", "text/x-diff; charset=utf-8")
		err = changeset.WriteDiff(w, roots, entries, o)
	default:
		writeError(w, 400, fault.BadValue, "unknown format", "use diff, json, stat or name-status")
		return
	}
	_ = err // the response has started
}

// apply and discard act on a stopped session's changeset: a running
// sandbox's overlay must not change under it, and the run holds its lock.
func (s *Server) apply(w http.ResponseWriter, r *http.Request, t string) {
	s.finish(w, r, t, true)
}

func (s *Server) discard(w http.ResponseWriter, r *http.Request, t string) {
	s.finish(w, r, t, false)
}

func (s *Server) finish(w http.ResponseWriter, r *http.Request, t string, apply bool) {
	rec := s.session(w, r, t)
	if rec == nil {
		return
	}
	if rec.Live() {
		writeError(w, http.StatusConflict, fault.Busy, "sandbox "+rec.ID+" is "+rec.State+": its changeset is applied or discarded once it is stopped",
			"DELETE /v1/sandboxes/"+rec.ID+" first")
		return
	}
	if rec.Changeset == "" {
		writeError(w, http.StatusNotFound, fault.NoChangeset, "sandbox "+rec.ID+" has no changeset", "its access is not changeset, or it wrote nothing")
		return
	}
	eng := s.engine()
	if !apply {
		d, err := eng.DiscardChangeset(r.Context(), rec.Changeset)
		if err != nil {
			writeFault(w, err)
			return
		}
		writeJSON(w, 200, map[string]any{"changeset": d.ID, "discarded": true})
		return
	}
	// A change to pinfold.yaml is refused unless asked for (policy=true):
	// the host obeys that file on later runs, and a tenant is not the
	// host's to speak for unless the operator's policy says it may. The
	// operator applies a tenant's with pinfold apply --policy.
	res, err := eng.ApplyChangeset(r.Context(), rec.Changeset, engine.ApplyRequest{Force: r.URL.Query().Get("force") == "true",
		Policy: r.URL.Query().Get("policy") == "true" && (t == "" || s.cfg.Policy.ApplyPolicy)}, nil)
	if err != nil {
		writeFault(w, err)
		return
	}
	writeJSON(w, 200, map[string]any{"changeset": rec.Changeset, "applied": res.Applied, "stripped": res.Stripped})
}

func (s *Server) pause(w http.ResponseWriter, r *http.Request, t string) { s.setPaused(w, r, t, true) }

func (s *Server) resume(w http.ResponseWriter, r *http.Request, t string) {
	s.setPaused(w, r, t, false)
}

func (s *Server) setPaused(w http.ResponseWriter, r *http.Request, t string, on bool) {
	rec := s.session(w, r, t)
	if rec == nil {
		return
	}
	var err error
	if on {
		rec, err = session.Pause(s.st, rec)
	} else {
		rec, err = session.Resume(s.st, rec)
	}
	if err != nil {
		writeFault(w, err)
		return
	}
	writeJSON(w, 200, rec)
}

func (s *Server) snapshot(w http.ResponseWriter, r *http.Request, t string) {
	rec := s.session(w, r, t)
	if rec == nil {
		return
	}
	snap, err := session.TakeSnapshot(r.Context(), s.st, rec)
	if err != nil {
		writeFault(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, snap)
}
