package config

import (
	"path"
	"strings"

	"github.com/pinfold/pinfold/internal/netpolicy"
)

// Checkers of single values: each returns "" when s is acceptable, or
// what is wrong with it, for a message.

func checkNotEmpty(s string) string {
	if s == "" {
		return "it is empty"
	}
	return ""
}

func checkBase(s string) string {
	kind, p, ok := strings.Cut(s, ":")
	switch {
	case s == "host" || s == "debian-12":
		return ""
	case ok && (kind == "dir" || kind == "tar" || kind == "oci"):
		if p == "" {
			return kind + ": needs a path, like " + kind + ":./rootfs"
		}
		return checkHostPath(p)
	}
	return "use host, debian-12, dir:PATH, tar:PATH or oci:PATH"
}

// checkHostPath accepts a path on the host: absolute, relative to the
// file's directory, or starting with ~/.
func checkHostPath(s string) string {
	switch {
	case s == "":
		return "it is empty"
	case strings.IndexByte(s, 0) >= 0:
		return "it holds a NUL character"
	case s[0] == '~' && s != "~" && !strings.HasPrefix(s, "~/"):
		return "only ~/ (your home) is understood, not ~user"
	}
	return ""
}

// checkWorkdir accepts an absolute path inside the sandbox.
func checkWorkdir(s string) string {
	switch {
	case s == "" || s[0] != '/':
		return "it must be an absolute path inside the sandbox"
	case strings.IndexByte(s, 0) >= 0:
		return "it holds a NUL character"
	}
	return ""
}

// checkInsidePath accepts an absolute path inside the sandbox other than
// / itself, where something is mounted.
func checkInsidePath(s string) string {
	if p := checkWorkdir(s); p != "" {
		return p
	}
	if path.Clean(s) == "/" {
		return "nothing can be mounted on / itself"
	}
	return ""
}

// checkRelPath accepts a path inside the workspace, relative to it.
func checkRelPath(s string) string {
	switch {
	case s == "":
		return "it is empty"
	case s[0] == '/' || s[0] == '~':
		return "it must be relative to the workspace"
	case strings.IndexByte(s, 0) >= 0:
		return "it holds a NUL character"
	}
	if c := path.Clean(s); c == ".." || strings.HasPrefix(c, "../") {
		return "it must be inside the workspace"
	}
	return ""
}

func checkUser(s string) string {
	if s == "" || s == "root" {
		return ""
	}
	return `use root, or "" for your own user`
}

func checkHostname(s string) string {
	if s == "" || len(s) > 64 {
		return "use 1 to 64 letters, digits, '-' and '.'"
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return "use 1 to 64 letters, digits, '-' and '.'"
		}
	}
	return ""
}

// checkCapability accepts a capability name in capital letters, with
// or without CAP_ (NET_RAW, CAP_NET_RAW).
func checkCapability(s string) string {
	u := strings.TrimPrefix(s, "CAP_")
	for _, c := range capNames {
		if c == u {
			return ""
		}
	}
	msg := "not a Linux capability"
	if sg := suggest(strings.TrimPrefix(strings.ToUpper(s), "CAP_"), capNames[:]); sg != "" {
		msg += " (did you mean " + sg + "?)"
	}
	return msg + "; names look like NET_RAW or CAP_NET_RAW"
}

// checkStoreName accepts a cache or secret name, which names a directory
// or file: lower-case letters, digits, '.', '_' and '-', starting with a
// letter or digit.
func checkStoreName(s string) string {
	if !validName(s, false) || s[0] == '.' || s[0] == '_' || s[0] == '-' {
		return "use lower-case letters, digits, '.', '_' and '-', starting with a letter or digit (at most 64)"
	}
	return ""
}

// validName accepts [a-z0-9._-]{1,64}, and upper-case letters too when
// upper is set.
func validName(s string, upper bool) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || upper && c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// CheckEnvName accepts a portable variable name, [A-Za-z_][A-Za-z0-9_]*:
// "" when it is one, else what is wrong with it.
func CheckEnvName(s string) string {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return "use letters, digits and '_', not starting with a digit"
		}
	}
	if s == "" {
		return "it is empty"
	}
	return ""
}

// checkNameGlob accepts a glob on variable names ("LC_*").
func checkNameGlob(s string) string {
	if strings.ContainsAny(s, "=\x00") {
		return "variable names cannot hold '=' or NUL"
	}
	return checkGlob(s)
}

// checkGlob accepts the globs dispatch and env use: * any run of
// characters, ? one character, [abc], [a-z] and [!a] (or [^a]) classes,
// and \ quoting the next character.
func checkGlob(s string) string {
	if s == "" {
		return "it is empty"
	}
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if i+1 >= len(s) {
				return "a \\ at the end quotes nothing"
			}
			i++
		case '[':
			j := i + 1
			if j < len(s) && (s[j] == '!' || s[j] == '^') {
				j++
			}
			for first := true; ; first = false {
				if j >= len(s) {
					return "a [ class is not closed with ]"
				}
				if s[j] == ']' && !first {
					break
				}
				j++
				if j+1 < len(s) && s[j] == '-' && s[j+1] != ']' {
					j += 2
				}
			}
			i = j
		}
	}
	return ""
}

// checkCommand accepts a command name, which dispatch compares with the
// base name of argv[0].
func checkCommand(s string) string {
	switch {
	case s == "":
		return "it is empty"
	case strings.IndexByte(s, '/') >= 0:
		return "use the command's name without a directory (npm, not /usr/bin/npm)"
	case strings.ContainsAny(s, "*?["):
		return "command is compared exactly; use match: or regex: for patterns"
	case strings.ContainsAny(s, " \t\x00"):
		return "a command name has no spaces; put arguments in args:"
	}
	return ""
}

func cleanPath(s string) string { return path.Clean(s) }

// checkSize accepts a size: a decimal number of bytes, optionally with a
// unit k, m, g or t (binary: 1k is 1024), which may be followed by "b"
// or "ib" (512m, 1.5g, 2GiB, 100mb), or just "b".
func checkSize(s string) string {
	const want = "use a number with an optional unit k, m, g or t, like 512m or 2g"
	i := digitsAt(s, 0)
	if i == 0 {
		return want
	}
	if i < len(s) && s[i] == '.' {
		j := digitsAt(s, i+1)
		if j == i+1 {
			return want
		}
		i = j
	}
	switch u := strings.ToLower(s[i:]); {
	case u == "" || u == "b":
	case len(u) >= 1 && strings.IndexByte("kmgt", u[0]) >= 0 && (len(u) == 1 || u[1:] == "b" || u[1:] == "ib"):
	default:
		return want
	}
	return ""
}

// checkDuration accepts a duration: a number of seconds (90, 1.5) or Go's
// syntax (30s, 5m, 1h30m, 500ms).
func checkDuration(s string) string {
	const want = "use a duration like 30s, 5m or 1h30m, or a number of seconds"
	i := 0
	for i < len(s) {
		j := digitsAt(s, i)
		if j == i {
			return want
		}
		if j < len(s) && s[j] == '.' {
			k := digitsAt(s, j+1)
			if k == j+1 {
				return want
			}
			j = k
		}
		if i == 0 && j == len(s) {
			return "" // seconds
		}
		k := j
		for k < len(s) && (s[k] < '0' || s[k] > '9') && s[k] != '.' {
			k++
		}
		switch s[j:k] {
		case "ns", "us", "µs", "ms", "s", "m", "h":
		default:
			return want
		}
		i = k
	}
	if i == 0 {
		return want
	}
	return ""
}

// digitsAt returns the index after the decimal digits at s[i:].
func digitsAt(s string, i int) int {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// checkNetRule accepts an allow entry.
func checkNetRule(s string) string {
	if _, err := netpolicy.ParseRule(s); err != nil {
		return err.Error()
	}
	return ""
}

// checkDenyRule accepts a deny entry: an allow entry without "tcp:".
func checkDenyRule(s string) string {
	if _, err := netpolicy.ParseRules(nil, []string{s}); err != nil {
		return strings.TrimPrefix(err.Error(), "deny: ")
	}
	return ""
}

// checkPublish accepts [HOSTADDR:]HOSTPORT:PORT.
func checkPublish(s string) string {
	if _, err := netpolicy.ParsePublish(s); err != nil {
		return err.Error()
	}
	return ""
}

// checkDNS accepts ADDR[:PORT].
func checkDNS(s string) string {
	if _, err := netpolicy.ParseDNS(s); err != nil {
		return err.Error()
	}
	return ""
}

// checkSystemCapability accepts a capability name of the catalog's form;
// the plan checks it against the catalog for the base.
func checkSystemCapability(s string) string {
	if checkCapability(s) == "" && strings.ToUpper(s) == s {
		return "that is a Linux capability: grant it with cap_add (capabilities lists what the system must provide, like postgres or imagecodecs)"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0) {
			return "names are lowercase letters, digits and '-', like postgres or imagecodecs"
		}
	}
	if s == "" {
		return "it is empty"
	}
	return ""
}
