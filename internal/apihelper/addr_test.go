package apihelper

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

// TestListenURL: serve --listen 0.0.0.0:PORT prints what was asked, not
// the dual-stack listener's [::].
func TestListenURL(t *testing.T) {
	for asked, want := range map[string]string{
		"0.0.0.0:0":   "http://0.0.0.0:",
		"127.0.0.1:0": "http://127.0.0.1:",
		":0":          "http://:",
	} {
		l, err := net.Listen("tcp", asked)
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		got := listenURL(asked, l.Addr())
		l.Close()
		if !strings.HasPrefix(got, want) || !strings.HasSuffix(got, ":"+itoa(port)) || strings.Contains(got, "[::]") {
			t.Errorf("%s: printed %s", asked, got)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
