package server

import (
	"context"
	"net/http"
)

// AsTenant serves the API's routes as tenant t, without authentication:
// for a caller in this process that authenticated already (the MCP
// server's tools), so that it goes through the same handlers, policy and
// isolation as a request on the wire.
func (s *Server) AsTenant(t string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, t)))
	})
}

// Handle adds a handler outside the API's routes (pinfold-api's /mcp),
// served after ServeHTTP authenticated the request: Tenant(r) says as whom.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Tenant is the tenant ServeHTTP authenticated r as ("" is the owner).
func Tenant(r *http.Request) (string, bool) {
	t, ok := r.Context().Value(tenantKey{}).(string)
	return t, ok
}
