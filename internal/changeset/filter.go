package changeset

import (
	"path"
	"strings"
)

// selector says which entries an operation covers.
type selector struct {
	paths   []string
	exclude []string
	prefix  func(int) string
}

func newSelector(paths, exclude []string, prefix func(int) string) selector {
	s := selector{exclude: exclude, prefix: prefix}
	for _, p := range paths {
		p = cleanRel(p)
		if p == "" {
			return selector{exclude: exclude, prefix: prefix} // "." selects everything
		}
		s.paths = append(s.paths, p)
	}
	return s
}

// cleanRel turns a user's relative path into the form entries use.
func cleanRel(p string) string {
	p = path.Clean("/" + p)
	return strings.TrimPrefix(p, "/")
}

// under tells whether p is dir or below it.
func under(p, dir string) bool {
	return p == dir || (len(p) > len(dir) && p[len(dir)] == '/' && p[:len(dir)] == dir)
}

func (s selector) match(e *Entry) bool {
	if len(s.paths) > 0 {
		ok := false
		full := ""
		if s.prefix != nil {
			full = s.prefix(e.Root) + e.Path
		}
		for _, p := range s.paths {
			if under(e.Path, p) || (full != "" && under(full, p)) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	for _, g := range s.exclude {
		if excluded(g, e.Path) {
			return false
		}
	}
	return true
}

// excluded tells whether the glob g matches p or one of its parents.
func excluded(g, p string) bool {
	g = strings.TrimPrefix(strings.TrimSuffix(g, "/"), "./")
	for i := 0; i <= len(p); i++ {
		if i == len(p) || p[i] == '/' {
			if globMatch(g, p[:i]) {
				return true
			}
		}
	}
	return false
}

// globMatch matches name against a shell-like pattern in which `*`
// matches any run of bytes, "/" included, `?` one byte, `[...]` a class
// (`[!...]` or `[^...]` negated, `a-z` ranges) and `\` quotes the next byte.
func globMatch(pattern, name string) bool {
	px, nx := 0, 0
	starP, starN := -1, -1
	for px < len(pattern) || nx < len(name) {
		if px < len(pattern) {
			switch c := pattern[px]; c {
			case '*':
				starP, starN = px, nx
				px++
				continue
			case '?':
				if nx < len(name) {
					px++
					nx++
					continue
				}
			case '[':
				if nx < len(name) {
					if ok, width := matchClass(pattern[px:], name[nx]); width > 0 {
						if ok {
							px += width
							nx++
							continue
						}
						break
					}
				}
				if nx < len(name) && name[nx] == '[' {
					px++
					nx++
					continue
				}
			case '\\':
				if px+1 < len(pattern) {
					c = pattern[px+1]
					if nx < len(name) && name[nx] == c {
						px += 2
						nx++
						continue
					}
					break
				}
				fallthrough
			default:
				if nx < len(name) && name[nx] == c {
					px++
					nx++
					continue
				}
			}
		}
		if starP >= 0 && starN < len(name) {
			starN++
			px, nx = starP+1, starN
			continue
		}
		return false
	}
	return true
}

// matchClass matches c against the class opening pattern ("[...]"); width
// is the length of the class, 0 when it is not closed.
func matchClass(pattern string, c byte) (ok bool, width int) {
	i := 1
	neg := false
	if i < len(pattern) && (pattern[i] == '!' || pattern[i] == '^') {
		neg = true
		i++
	}
	first := true
	for i < len(pattern) {
		if pattern[i] == ']' && !first {
			return ok != neg, i + 1
		}
		first = false
		lo := pattern[i]
		if lo == '\\' && i+1 < len(pattern) {
			i++
			lo = pattern[i]
		}
		hi := lo
		if i+2 < len(pattern) && pattern[i+1] == '-' && pattern[i+2] != ']' {
			hi = pattern[i+2]
			if hi == '\\' && i+3 < len(pattern) {
				hi = pattern[i+3]
				i++
			}
			i += 2
		}
		if lo <= c && c <= hi {
			ok = true
		}
		i++
	}
	return false, 0
}

// Unmatched returns the paths that select no entry: a path names an entry
// or a directory above one, as DiffOptions.Paths and ApplyOptions.Paths
// do (prefix, when set, also matches an entry by its root's prefix and
// its path, as diff shows captured directories). "." matches everything.
func Unmatched(entries []Entry, paths []string, prefix func(int) string) []string {
	var out []string
	for _, p := range paths {
		sel := newSelector([]string{p}, nil, prefix)
		if len(sel.paths) == 0 {
			continue
		}
		found := false
		for i := range entries {
			if sel.match(&entries[i]) {
				found = true
				break
			}
		}
		if !found {
			out = append(out, p)
		}
	}
	return out
}
