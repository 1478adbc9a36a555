package server

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzE2BRoutes: any method, path, sandbox header and body a tenant sends
// to the E2B protocol of a server without sandboxes is answered in one of
// its shapes (a JSON body; a stream's envelopes ending with the end
// envelope; a bare failed status for a stream, which connect-web reads
// by status alone), and starts nothing.
func FuzzE2BRoutes(f *testing.F) {
	for _, s := range [][4]string{
		{"GET", "/sandboxes/000000000000", "", ""},
		{"DELETE", "/sandboxes/../../x", "", ""},
		{"POST", "/sandboxes/x/timeout", "", `{"timeout":-1}`},
		{"POST", "/v2/sandboxes/x/connect", "", `{"timeout":1}`},
		{"GET", "/v2/sandboxes?metadata=a%3Db&limit=1&nextToken=-3", "", ""},
		{"GET", "/files?path=/etc/passwd", "000000000000", ""},
		{"POST", "/files?path=x", "../../../etc", "data"},
		{"POST", "/process.Process/Start", "abcdef012345", "\x00\x00\x00\x00\x02{}"},
		{"POST", "/filesystem.Filesystem/Stat", "abcdef012345", `{"path":"/"}`},
		{"GET", "/health", "x", ""},
		{"POST", "/sandboxes/x/fork", "", "{}"},
	} {
		f.Add(s[0], s[1], s[2], []byte(s[3]))
	}
	store := f.TempDir()
	s := New(Config{Store: store, Pinfold: "/nonexistent/pinfold", MaxBody: 4096, MaxUpload: 4096, Log: &bytes.Buffer{}})
	defer s.Close()
	f.Fuzz(func(t *testing.T, method, target, id string, body []byte) {
		if !strings.HasPrefix(target, "/") || strings.ContainsAny(target, " \r\n\t#") || !validMethod(method) ||
			strings.ContainsAny(id, "\r\n\x00") {
			return
		}
		r, err := http.NewRequest(method, "http://pinfold"+target, bytes.NewReader(body))
		if err != nil || !isE2B(r.URL.Path) {
			return
		}
		// Creating is FuzzTenantCreate's (through the same handler).
		if method == "POST" && r.URL.Path == "/v2/sandboxes" {
			return
		}
		r.Header.Set("E2b-Sandbox-Id", id)
		stream := len(body) > 0 && body[0] == 0
		if stream {
			r.Header.Set("Content-Type", "application/connect+json")
		} else {
			r.Header.Set("Content-Type", "application/json")
		}
		w := httptest.NewRecorder()
		s.serveE2B(w, r, "a")
		b := w.Body.Bytes()
		switch {
		case w.Header().Get("Content-Type") == "application/connect+json":
			if w.Code != 200 || !endsWithEnd(b) {
				t.Fatalf("%s %s: stream %d %q", method, target, w.Code, b)
			}
		case w.Code == http.StatusNoContent, w.Code >= 300 && len(b) == 0:
		default:
			if !json.Valid(b) {
				t.Fatalf("%s %s: %d %q", method, target, w.Code, b)
			}
		}
		if list, _ := s.st.List("a"); len(list) > 0 {
			t.Fatalf("%s %s started %+v", method, target, list[0])
		}
	})
}

// endsWithEnd says whether b is envelopes, the last the end envelope.
func endsWithEnd(b []byte) bool {
	last := byte(0xff)
	for len(b) > 0 {
		if len(b) < 5 {
			return false
		}
		n := int(binary.BigEndian.Uint32(b[1:5]))
		if len(b) < 5+n || !json.Valid(b[5:5+n]) {
			return false
		}
		last, b = b[0], b[5+n:]
	}
	return last == 2
}
