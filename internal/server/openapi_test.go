package server

import (
	"bufio"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestOpenAPIMatchesRoutes checks api/openapi.yaml names exactly the
// server's routes: every path and method of one is in the other.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	f, err := os.Open("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var doc []string
	inPaths, path := false, ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case l == "paths:":
			inPaths = true
		case inPaths && l != "" && !strings.HasPrefix(l, " "):
			inPaths = false
		case inPaths && strings.HasPrefix(l, "  /") && strings.HasSuffix(l, ":"):
			path = strings.TrimSuffix(strings.TrimSpace(l), ":")
		case inPaths && len(l) > 4 && strings.HasPrefix(l, "    ") && l[4] != ' ':
			m := strings.TrimSuffix(strings.TrimSpace(l), ":")
			if slices.Contains([]string{"get", "put", "post", "delete", "patch", "head"}, m) {
				doc = append(doc, strings.ToUpper(m)+" "+path)
			}
		}
	}
	var code []string
	for _, r := range Routes() {
		code = append(code, r.Method+" "+r.Path)
	}
	slices.Sort(doc)
	slices.Sort(code)
	if len(doc) < 10 {
		t.Fatalf("found only %d operations in openapi.yaml: %v", len(doc), doc)
	}
	for _, d := range doc {
		if !slices.Contains(code, d) {
			t.Errorf("openapi.yaml has %s, the server does not", d)
		}
	}
	for _, c := range code {
		if !slices.Contains(doc, c) {
			t.Errorf("the server has %s, openapi.yaml does not", c)
		}
	}
}
