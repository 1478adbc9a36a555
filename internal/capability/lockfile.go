package capability

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// maxLockfile bounds what FromLockfiles reads of one file; real lockfiles
// of large monorepos stay well below it.
const maxLockfile = 64 << 20

// FromLockfiles infers capabilities from the lockfiles in dir (not its
// subdirectories): requirements*.txt, poetry.lock, uv.lock, Pipfile.lock,
// package-lock.json, npm-shrinkwrap.json and Cargo.lock. Missing files
// are skipped. It returns the findings of the files it could read even
// when another one fails.
func FromLockfiles(dir string) ([]Finding, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading lockfiles: %w", err)
	}
	var found []Finding
	var errs []error
	for _, e := range entries {
		name := e.Name()
		parse := lockfileParser(name)
		if parse == nil {
			continue
		}
		data, err := readLockfile(filepath.Join(dir, name))
		if err != nil {
			errs = append(errs, fmt.Errorf("reading %s: %w", name, err))
			continue
		}
		fs, err := parse(name, data)
		if err != nil {
			errs = append(errs, fmt.Errorf("parsing %s: %w", name, err))
		}
		found = append(found, fs...)
	}
	sortFindings(found)
	return slices.Compact(found), errors.Join(errs...)
}

type lockParser func(file string, data []byte) ([]Finding, error)

func lockfileParser(name string) lockParser {
	switch name {
	case "poetry.lock", "uv.lock":
		return func(f string, b []byte) ([]Finding, error) {
			return parseTOMLLock(f, b, pypiCaps[:], normalizePyPI), nil
		}
	case "Cargo.lock":
		return func(f string, b []byte) ([]Finding, error) {
			return parseTOMLLock(f, b, crateCaps[:], normalizeCrate), nil
		}
	case "Pipfile.lock":
		return parsePipfileLock
	case "package-lock.json", "npm-shrinkwrap.json":
		return parseNPMLock
	}
	if strings.HasPrefix(name, "requirements") && strings.HasSuffix(name, ".txt") {
		return func(f string, b []byte) ([]Finding, error) { return parseRequirements(f, b), nil }
	}
	return nil
}

// readLockfile reads a regular file of bounded size; a FIFO or a device
// named like a lockfile must not hang or flood the scan.
func readLockfile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	if st.Size() > maxLockfile {
		return nil, fmt.Errorf("larger than %d MiB", maxLockfile>>20)
	}
	return io.ReadAll(io.LimitReader(f, maxLockfile))
}

// findings returns one Finding per capability table lists for pkg.
func findings(table []pair, pkg, file, what string) []Finding {
	var out []Finding
	for _, c := range lookup(table, pkg) {
		out = append(out, Finding{Capability: c, Source: Lockfile, Evidence: file + ": " + what})
	}
	return out
}

// parseRequirements reads pip's requirements format: one requirement a
// line, with comments, backslash continuations, options (-r, --hash...),
// environment markers and editable VCS lines that name an #egg=.
func parseRequirements(file string, data []byte) []Finding {
	var out []Finding
	var logical string
	for line := range strings.Lines(string(data)) {
		line = strings.TrimRight(line, "\r\n")
		if strings.HasSuffix(line, `\`) {
			logical += strings.TrimSuffix(line, `\`) + " "
			continue
		}
		line, logical = logical+line, ""
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if strings.HasPrefix(line, "-e") || strings.HasPrefix(line, "--editable") {
			if _, egg, ok := strings.Cut(line, "#egg="); ok {
				egg, _, _ = strings.Cut(egg, "&")
				out = append(out, findings(pypiCaps[:], normalizePyPI(egg), file, line)...)
			}
			continue
		}
		if line[0] == '-' {
			continue
		}
		spec, _, _ := strings.Cut(line, ";")
		spec, _, _ = strings.Cut(spec, " --")
		spec = strings.TrimSpace(spec)
		end := strings.IndexFunc(spec, func(r rune) bool { return !isNameRune(r) })
		if end < 0 {
			end = len(spec)
		}
		out = append(out, findings(pypiCaps[:], normalizePyPI(spec[:end]), file, spec)...)
	}
	return out
}

// parseTOMLLock reads the [[package]] tables of poetry.lock, uv.lock and
// Cargo.lock. The generators put table headers at the start of a line and
// name and version as plain strings, which is all this needs of TOML.
func parseTOMLLock(file string, data []byte, table []pair, norm func(string) string) []Finding {
	var out []Finding
	inPackage := false
	name, version := "", ""
	flush := func() {
		if name != "" {
			out = append(out, findings(table, norm(name), file, strings.TrimSpace(name+" "+version))...)
		}
		name, version = "", ""
	}
	for line := range strings.Lines(string(data)) {
		if strings.HasPrefix(line, "[") {
			flush()
			inPackage = strings.TrimSpace(line) == "[[package]]"
			continue
		}
		if !inPackage {
			continue
		}
		switch k, v, ok := tomlString(line); {
		case !ok:
		case k == "name":
			name = v
		case k == "version":
			version = v
		}
	}
	flush()
	return out
}

// tomlString parses `key = "value"` (or single quotes).
func tomlString(line string) (key, value string, ok bool) {
	k, v, ok := strings.Cut(line, "=")
	if !ok {
		return "", "", false
	}
	v = strings.TrimSpace(v)
	if len(v) < 2 || (v[0] != '"' && v[0] != '\'') {
		return "", "", false
	}
	end := strings.IndexByte(v[1:], v[0])
	if end < 0 {
		return "", "", false
	}
	return strings.TrimSpace(k), v[1 : 1+end], true
}

func parsePipfileLock(file string, data []byte) ([]Finding, error) {
	type entry struct {
		Version string `json:"version"` // "==2.9.9"
	}
	var lock struct {
		Default, Develop map[string]entry
	}
	if err := json.Unmarshal(data, &lock); err != nil {
		return nil, err
	}
	var out []Finding
	for _, section := range [...]map[string]entry{lock.Default, lock.Develop} {
		for name, p := range section {
			out = append(out, findings(pypiCaps[:], normalizePyPI(name), file, name+p.Version)...)
		}
	}
	return out, nil
}

type npmDependency struct {
	Version      string                   `json:"version"`
	Dependencies map[string]npmDependency `json:"dependencies"`
}

// parseNPMLock reads lockfile versions 2 and 3 ("packages", keyed by
// install path) and falls back to version 1's nested "dependencies".
func parseNPMLock(file string, data []byte) ([]Finding, error) {
	var lock struct {
		Packages map[string]struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"packages"`
		Dependencies map[string]npmDependency `json:"dependencies"`
	}
	if err := json.Unmarshal(data, &lock); err != nil {
		return nil, err
	}
	var out []Finding
	add := func(name, version string) {
		what := name
		if version != "" {
			what += "@" + version
		}
		out = append(out, findings(npmCaps[:], strings.ToLower(name), file, what)...)
	}
	if len(lock.Packages) > 0 {
		for path, p := range lock.Packages {
			i := strings.LastIndex(path, "node_modules/")
			if i < 0 {
				continue // the project itself or a workspace link
			}
			name := path[i+len("node_modules/"):]
			if p.Name != "" {
				name = p.Name // an alias installs p.Name under another folder
			}
			add(name, p.Version)
		}
		return out, nil
	}
	var walk func(map[string]npmDependency)
	walk = func(deps map[string]npmDependency) {
		for name, d := range deps {
			add(name, d.Version)
			walk(d.Dependencies)
		}
	}
	walk(lock.Dependencies)
	return out, nil
}

func isNameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
}

// normalizePyPI applies PEP 503: lower case, runs of -_. become one -.
func normalizePyPI(name string) string {
	var b strings.Builder
	sep := false
	for _, r := range strings.ToLower(strings.TrimSpace(name)) {
		if r == '-' || r == '_' || r == '.' {
			sep = true
			continue
		}
		if sep && b.Len() > 0 {
			b.WriteByte('-')
		}
		sep = false
		b.WriteRune(r)
	}
	return b.String()
}

// normalizeCrate folds what crates.io treats as the same name.
func normalizeCrate(name string) string {
	return strings.ReplaceAll(strings.ToLower(name), "_", "-")
}
