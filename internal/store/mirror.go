package store

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ErrNoMirror: the machine's apt sources name no Debian mirror for the
// suite a base needs.
var ErrNoMirror = errors.New("no Debian mirror in the apt sources")

// AptMirror returns the URI of the first enabled "deb" source for suite
// (exactly: "bookworm", not "bookworm-updates") in the apt configuration
// under root ("/" for the machine's own): /etc/apt/sources.list and the
// *.list and deb822 *.sources files of /etc/apt/sources.list.d, in the
// order apt reads them.
func AptMirror(root, suite string) (string, error) {
	dir := filepath.Join(root, "etc/apt")
	files := []string{filepath.Join(dir, "sources.list")}
	entries, _ := os.ReadDir(filepath.Join(dir, "sources.list.d"))
	var more []string
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".list") || strings.HasSuffix(n, ".sources") {
			more = append(more, filepath.Join(dir, "sources.list.d", n))
		}
	}
	sort.Strings(more)
	files = append(files, more...)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var uri string
		if strings.HasSuffix(f, ".sources") {
			uri = deb822Mirror(string(b), suite)
		} else {
			uri = oneLineMirror(string(b), suite)
		}
		if uri != "" {
			return strings.TrimSuffix(uri, "/"), nil
		}
	}
	return "", ErrNoMirror
}

// oneLineMirror reads "deb [options] URI SUITE COMPONENTS..." lines.
func oneLineMirror(text, suite string) string {
	for _, line := range strings.Split(text, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		f = f[1:]
		if strings.HasPrefix(f[0], "[") { // [arch=amd64 signed-by=...]
			for len(f) > 0 && !strings.HasSuffix(f[0], "]") {
				f = f[1:]
			}
			if len(f) == 0 {
				continue
			}
			f = f[1:]
		}
		if len(f) >= 2 && f[1] == suite {
			return f[0]
		}
	}
	return ""
}

// deb822Mirror reads the stanzas of a .sources file.
func deb822Mirror(text, suite string) string {
	for _, stanza := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n\n") {
		fields := map[string]string{}
		key := ""
		for _, line := range strings.Split(stanza, "\n") {
			if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
				continue
			}
			if (line[0] == ' ' || line[0] == '\t') && key != "" {
				fields[key] += " " + strings.TrimSpace(line)
				continue
			}
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			key = strings.ToLower(strings.TrimSpace(k))
			fields[key] = strings.TrimSpace(v)
		}
		if strings.EqualFold(fields["enabled"], "no") || !hasWord(fields["types"], "deb") || !hasWord(fields["suites"], suite) {
			continue
		}
		if uris := strings.Fields(fields["uris"]); len(uris) > 0 {
			return uris[0]
		}
	}
	return ""
}

func hasWord(list, w string) bool {
	for _, f := range strings.Fields(list) {
		if f == w {
			return true
		}
	}
	return false
}
