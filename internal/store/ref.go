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

// SplitReference splits HOST/REPO:TAG or HOST/REPO@DIGEST into the
// repository and the tag or digest ("" when neither is given).
func SplitReference(ref string) (repo, tagOrDigest string) {
	ref = strings.TrimPrefix(ref, "docker://")
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		return ref[:i], ref[i+1:]
	}
	slash := strings.LastIndexByte(ref, '/')
	if i := strings.LastIndexByte(ref, ':'); i > slash {
		return ref[:i], ref[i+1:]
	}
	return ref, ""
}

// Pinned reports whether ref names its manifest by a sha256 digest.
func Pinned(ref string) bool {
	_, d := SplitReference(ref)
	if !strings.HasPrefix(d, "sha256:") || len(d) != len("sha256:")+64 {
		return false
	}
	for _, c := range d[len("sha256:"):] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
