package store

import "strings"

// IsReference reports whether s names an image in a registry rather than a
// local file: its first component is a host (has a dot or a port, or is
// localhost) and it has a repository path.
func IsReference(s string) bool {
	s = strings.TrimPrefix(s, "docker://")
	host, rest, ok := strings.Cut(s, "/")
	if !ok || rest == "" || host == "" || host[0] == '.' || host[0] == '~' {
		return false
	}
	return strings.ContainsAny(host, ".:") || host == "localhost"
}
