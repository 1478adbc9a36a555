package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// decodeBody runs the server's body decoding on b, as a handler does.
func decodeBody(s *Server, b []byte, v any) (*httptest.ResponseRecorder, bool) {
	w := httptest.NewRecorder()
	r := httptest.NewRequest("POST", "/v1/sandboxes", bytes.NewReader(b))
	return w, s.decode(w, r, v)
}

// isError says whether w holds one of the API's error answers: a 4xx
// with a JSON body naming a PF code.
func isError(w *httptest.ResponseRecorder) bool {
	var e struct{ Error Error }
	return w.Code >= 400 && w.Code < 500 && json.Unmarshal(w.Body.Bytes(), &e) == nil && strings.HasPrefix(e.Error.Code, "PF")
}

// FuzzTenantCreate: a tenant's create request under an operator's policy.
// A body the server refuses is answered with an API error and goes no
// further; one it decodes decodes again the same once encoded; and what
// the policy grants is within the policy, field by field: granting the
// granted request again is granted, and changes nothing the tenant set.
func FuzzTenantCreate(f *testing.F) {
	for _, s := range [][2]string{
		{"", `{"name":"n","base":"host","network":"none","memory":"1g","env":["A=1"]}`},
		{"", `{"workspace":"/etc"}`},
		{"", `{"mounts":["/root:/r"],"unknown":1}`},
		{"", `{"env":["HOME"],"allow":["127.0.0.1"],"dns":["1.1.1.1:53"]}`},
		{"", `{"memory":"unlimited"}` + strings.Repeat(" ", 5000)},
		{`{"backends":["native","docker"],"networks":["none","outbound"],"bases":["host","dir:/srv"],"allow":["example.com"],"env":["LANG"],` +
			`"limits":{"memory":"4g","timeout":"1h"},"templates":{"py":{"base":"dir:/py","network":"allow","allow":["pypi.org"],"env":["PATH","X=1"],"limits":{"memory":"2g"}}}}`,
			`{"template":"py","allow":["pypi.org"],"env":["PATH","LANG"],"memory":"2g","timeout":"30m"}`},
		{`{"limits":{"memory":"unlimited","pids":0}}`, `{"memory":"64g","pids":"1"}`},
	} {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	dir := f.TempDir()
	s := &Server{cfg: Config{MaxBody: 4096, MaxUpload: 4096}}
	f.Fuzz(func(t *testing.T, policy, body []byte) {
		pol := DefaultPolicy()
		if len(policy) > 0 {
			p := filepath.Join(dir, "policy.json")
			if err := os.WriteFile(p, policy, 0o600); err != nil {
				t.Fatal(err)
			}
			var err error
			if pol, err = ReadPolicy(p); err != nil {
				return
			}
		}
		var c CreateRequest
		w, ok := decodeBody(s, body, &c)
		if !ok {
			if !isError(w) {
				t.Fatalf("refused with %d %q", w.Code, w.Body.String())
			}
			return
		}
		if w.Body.Len() > 0 {
			t.Fatalf("accepted, and answered %q", w.Body.String())
		}
		enc, _ := json.Marshal(c)
		var again CreateRequest
		if _, ok := decodeBody(s, enc, &again); !ok {
			t.Fatalf("%s is refused", enc)
		}
		if enc2, _ := json.Marshal(again); !bytes.Equal(enc2, enc) {
			t.Fatalf("%s decoded as %s", enc, enc2)
		}

		gc, g, err := pol.grantRequest(c)
		if err != nil {
			return
		}
		switch {
		case gc.Workspace != "" || len(gc.Mounts) > 0:
			t.Fatalf("granted host paths: %+v", gc)
		case !slices.Contains(g.bases(), gc.Base), !slices.Contains(g.backends(), gc.Backend), !slices.Contains(g.networks(), gc.Network):
			t.Fatalf("granted base %q, backend %q, network %q", gc.Base, gc.Backend, gc.Network)
		case gc.Template != "" && pol.Templates[gc.Template] == nil:
			t.Fatalf("granted the template %q, which the policy has not", gc.Template)
		}
		for _, a := range gc.Allow {
			if !slices.Contains(g.allow(), a) {
				t.Fatalf("granted allow %q", a)
			}
		}
		for _, d := range gc.DNS {
			if !slices.Contains(g.dns(), d) {
				t.Fatalf("granted dns %q", d)
			}
		}
		for _, e := range gc.Env {
			if !strings.Contains(e, "=") && !slices.Contains(g.env(), e) {
				t.Fatalf("granted the server's variable %q", e)
			}
		}
		// Every field of what was granted passes its rule again.
		gc2, _, err := pol.grantRequest(gc)
		if err != nil {
			t.Fatalf("%+v was granted as %+v, which is then refused: %v", c, gc, err)
		}
		gc2.Env, gc.Env = nil, nil // a template's variables are added each time
		if !reflect.DeepEqual(gc2, gc) {
			t.Fatalf("granting twice changed %+v to %+v", gc, gc2)
		}
		// What the tenant set is what it gets.
		cv, gv := reflect.ValueOf(c), reflect.ValueOf(gc)
		for i := range cv.NumField() {
			if name := cv.Type().Field(i).Name; name != "Env" && !cv.Field(i).IsZero() && !reflect.DeepEqual(cv.Field(i).Interface(), gv.Field(i).Interface()) {
				t.Fatalf("the tenant's %s %v was granted as %v", name, cv.Field(i), gv.Field(i))
			}
		}
	})
}

// FuzzTenantRoutes: any method, path, query and body a tenant sends to a
// server without sandboxes is answered with a JSON answer or an API
// error, and starts nothing.
func FuzzTenantRoutes(f *testing.F) {
	for _, s := range [][3]string{
		{"GET", "/v1/sandboxes/x/files?path=/etc/passwd", ""},
		{"GET", "/v1/sandboxes/0/files", ""}, // once answered twice: no sandbox, no path
		{"PUT", "/v1/sandboxes/../../x/files?path=..%2f..", "data"},
		{"DELETE", "/v1/sandboxes/x/ports/99999999999999999999", ""},
		{"POST", "/v1/sandboxes/x/exec", `{"args":["sh"]}`},
		{"POST", "/v1/sandboxes/x/ports", `{"port":-1,"host_port":70000}`},
		{"POST", "/v1/sandboxes/x/changeset/apply?policy=true", ""},
		{"GET", "/v1/sandboxes?all=true", ""},
		{"GET", "/v1/sandboxes/x/logs?follow=1&tail=-5", ""},
		{"GET", "/v1/health", ""},
	} {
		f.Add(s[0], s[1], []byte(s[2]))
	}
	store := f.TempDir()
	s := New(Config{Store: store, Pinfold: "/nonexistent/pinfold", MaxBody: 4096, MaxUpload: 4096, Log: &bytes.Buffer{}})
	defer s.Close()
	f.Fuzz(func(t *testing.T, method, target string, body []byte) {
		if !strings.HasPrefix(target, "/") || strings.ContainsAny(target, " \r\n\t#") || !validMethod(method) {
			return
		}
		// Creating is FuzzTenantCreate's; here every id names nothing.
		if method == "POST" && strings.TrimRight(strings.SplitN(target, "?", 2)[0], "/") == "/v1/sandboxes" {
			return
		}
		r, err := http.NewRequest(method, "http://pinfold"+target, bytes.NewReader(body))
		if err != nil {
			return
		}
		r = r.WithContext(context.WithValue(context.Background(), tenantKey{}, "a"))
		w := httptest.NewRecorder()
		s.mux.ServeHTTP(w, r)
		switch {
		case w.Code == http.StatusNotFound && w.Header().Get("Content-Type") != "application/json",
			w.Code == http.StatusMethodNotAllowed, w.Code == http.StatusMovedPermanently, w.Code == http.StatusTemporaryRedirect:
			// the mux's own answers to paths and methods of no route
		case w.Code < 300:
			if !json.Valid(w.Body.Bytes()) {
				t.Fatalf("%s %s: %d %q", method, target, w.Code, w.Body.String())
			}
		case !isError(w):
			t.Fatalf("%s %s: %d %q", method, target, w.Code, w.Body.String())
		}
		if list, _ := s.st.List("a"); len(list) > 0 {
			t.Fatalf("%s %s started %+v", method, target, list[0])
		}
	})
}

func validMethod(m string) bool {
	return slices.Contains([]string{"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"}, m)
}
