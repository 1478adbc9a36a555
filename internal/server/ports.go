package server

// The session port routes: publish a sandbox port on the host, list and
// unpublish them.

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"syscall"

	"github.com/pinfold/pinfold/internal/agent"
	"github.com/pinfold/pinfold/internal/fault"
)

// PortRequest is the body of POST /v1/sandboxes/{id}/ports.
type PortRequest struct {
	// Port is the sandbox's TCP port (on its loopback).
	Port int `json:"port"`
	// HostPort is the port on the host's 127.0.0.1; 0 picks a free one.
	HostPort int `json:"host_port,omitempty"`
}

func (s *Server) publish(w http.ResponseWriter, r *http.Request, t string) {
	var pr PortRequest
	if !s.decode(w, r, &pr) {
		return
	}
	rec := s.running(w, r, t)
	if rec == nil {
		return
	}
	if pr.Port <= 0 || pr.Port > 65535 || pr.HostPort < 0 || pr.HostPort > 65535 {
		writeError(w, 400, fault.BadValue, "invalid port", "")
		return
	}
	// A tenant takes no host port the operator did not grant: a host
	// service may expect it.
	hostPorts := []int{pr.HostPort}
	if t != "" {
		if err := s.cfg.Policy.hostPort(pr.HostPort); err != nil {
			s.refused(w, t, err)
			return
		}
		if hr := s.cfg.Policy.HostPorts; hr != nil && pr.HostPort == 0 {
			hostPorts = hostPorts[:0]
			for p := hr.From; p <= hr.To; p++ {
				hostPorts = append(hostPorts, p)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.ports[rec.ID][pr.Port]; ok {
		writeError(w, http.StatusConflict, fault.BadValue, fmt.Sprintf("port %d is published already", pr.Port), "")
		return
	}
	var l net.Listener
	var err error
	for _, hp := range hostPorts {
		l, err = agent.Forward(s.st.Sock(rec.ID), net.JoinHostPort("127.0.0.1", strconv.Itoa(hp)), pr.Port)
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	if err != nil {
		writeError(w, http.StatusConflict, fault.BadValue, err.Error(), "")
		return
	}
	if s.ports[rec.ID] == nil {
		s.ports[rec.ID] = map[int]net.Listener{}
	}
	s.ports[rec.ID][pr.Port] = l
	writeJSON(w, http.StatusCreated, Port{Port: pr.Port, Host: l.Addr().String()})
}

func (s *Server) listPorts(w http.ResponseWriter, r *http.Request, t string) {
	rec := s.session(w, r, t)
	if rec == nil {
		return
	}
	s.mu.Lock()
	out := []Port{}
	for p, l := range s.ports[rec.ID] {
		out = append(out, Port{Port: p, Host: l.Addr().String()})
	}
	s.mu.Unlock()
	writeJSON(w, 200, out)
}

func (s *Server) unpublish(w http.ResponseWriter, r *http.Request, t string) {
	rec := s.session(w, r, t)
	if rec == nil {
		return
	}
	port, _ := strconv.Atoi(r.PathValue("port"))
	s.mu.Lock()
	l, ok := s.ports[rec.ID][port]
	delete(s.ports[rec.ID], port)
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, fault.BadValue, "port "+r.PathValue("port")+" is not published", "")
		return
	}
	l.Close()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) closePorts(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.ports[id] {
		l.Close()
	}
	delete(s.ports, id)
}
