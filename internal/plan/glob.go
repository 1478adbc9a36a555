package plan

import "errors"

var errBadGlob = errors.New("bad glob")

// matchGlob reports whether s matches glob: * matches any run of
// characters (spaces and slashes too), ? any one character, [abc] and
// [a-z] a class ([!a] negated), and \ quotes the next character.
func matchGlob(glob, s string) (bool, error) {
	// Iterative matching with one backtrack point for the last *.
	gi, si := 0, 0
	starG, starS := -1, 0
	for si < len(s) {
		if gi < len(glob) {
			switch c := glob[gi]; c {
			case '*':
				starG, starS = gi, si
				gi++
				continue
			case '?':
				gi++
				si++
				continue
			case '[':
				ok, n, err := matchClass(glob[gi:], s[si])
				if err != nil {
					return false, err
				}
				if ok {
					gi += n
					si++
					continue
				}
			case '\\':
				if gi+1 >= len(glob) {
					return false, errBadGlob
				}
				if glob[gi+1] == s[si] {
					gi += 2
					si++
					continue
				}
			default:
				if c == s[si] {
					gi++
					si++
					continue
				}
			}
		}
		if starG < 0 {
			return false, nil
		}
		starS++
		gi, si = starG+1, starS
	}
	for gi < len(glob) && glob[gi] == '*' {
		gi++
	}
	return gi == len(glob), nil
}

// matchClass matches c against the class at the start of g and returns
// the class's length.
func matchClass(g string, c byte) (bool, int, error) {
	i := 1
	neg := i < len(g) && (g[i] == '!' || g[i] == '^')
	if neg {
		i++
	}
	match := false
	for first := true; ; first = false {
		if i >= len(g) {
			return false, 0, errBadGlob
		}
		if g[i] == ']' && !first {
			break
		}
		lo := g[i]
		i++
		hi := lo
		if i+1 < len(g) && g[i] == '-' && g[i+1] != ']' {
			hi = g[i+1]
			i += 2
		}
		if lo <= c && c <= hi {
			match = true
		}
	}
	return match != neg, i + 1, nil
}
