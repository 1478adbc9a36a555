// Package shim writes, lists and removes shims: small /bin/sh scripts named
// after a tool (npm, pip, cargo...) that run the tool through pinfold, so
// that typing "npm install" in a shell whose PATH starts with the shim
// directory runs "pinfold run -- npm install" and pinfold's dispatch rules
// pick the profile.
//
// A shim first removes its own directory from PATH (every entry naming it,
// also through a symlink or with a trailing slash), then replaces itself
// with "<pinfold> run -- TOOL ARGS...". Whatever pinfold then starts, on
// the host or in a sandbox, finds the real tool on PATH and never the shim
// again, so a shim cannot recurse into itself.
//
// Every shim carries a marker line; List and Uninstall touch only files
// with it, and Install refuses to replace a file without it.
package shim

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Marker is the second line of every shim.
const Marker = "# pinfold-shim 1: written by \"pinfold shim install\"; \"pinfold shim uninstall\" removes it"

// Error is an error of this package; its values are constants, so the
// package does no work at initialisation.
type Error string

func (e Error) Error() string { return string(e) }

const (
	// ErrNotShim marks a file in the shim directory that pinfold did not
	// write; pinfold neither replaces nor removes it.
	ErrNotShim Error = "not a pinfold shim"
	// ErrNoShim marks a tool that has no shim.
	ErrNoShim Error = "no shim"
)

// DefaultTools are the tools Install shims when given none.
func DefaultTools() []string {
	return []string{"npm", "npx", "pnpm", "yarn", "pip", "pip3", "uv", "poetry", "cargo", "go"}
}

// Shim is an installed shim.
type Shim struct {
	Tool    string // the tool it runs
	Path    string // the shim's file
	Pinfold string // the pinfold binary it runs
}

// Dir returns the shim directory: $PINFOLD_SHIM_DIR if set, else
// /usr/local/lib/pinfold/shims for root, else
// $XDG_DATA_HOME/pinfold/shims or ~/.local/share/pinfold/shims.
func Dir() (string, error) {
	if d := os.Getenv("PINFOLD_SHIM_DIR"); d != "" {
		return filepath.Abs(d)
	}
	if os.Geteuid() == 0 {
		return "/usr/local/lib/pinfold/shims", nil
	}
	if d := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "pinfold", "shims"), nil
	}
	home := os.Getenv("HOME")
	if !filepath.IsAbs(home) {
		return "", errors.New("finding the shim directory: HOME is not set; set PINFOLD_SHIM_DIR")
	}
	return filepath.Join(home, ".local", "share", "pinfold", "shims"), nil
}

// ValidTool checks that name can be a shim: one file name of letters,
// digits and . _ + -, not starting with '.' or '-'.
func ValidTool(name string) error {
	if name == "" || len(name) > 64 || name[0] == '.' || name[0] == '-' {
		return fmt.Errorf("invalid tool name %q", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '+' || c == '-') {
			return fmt.Errorf("invalid tool name %q: use letters, digits, '.', '_', '+' and '-'", name)
		}
	}
	return nil
}

// quote quotes s for sh in single quotes.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Script is the shim for tool in dir that runs pinfold (absolute paths).
func Script(dir, pinfold, tool string) []byte {
	var b bytes.Buffer
	b.WriteString("#!/bin/sh\n")
	b.WriteString(Marker + "\n")
	b.WriteString("# Runs " + tool + " through pinfold. Its own directory leaves PATH first, so\n")
	b.WriteString("# nothing started from here (even on the host) can reach this shim again.\n")
	b.WriteString("pinfold_shim_dir=" + quote(dir) + "\n")
	b.WriteString(`pinfold_shim_rest=$PATH:
PATH=
while [ -n "$pinfold_shim_rest" ]; do
	pinfold_shim_e=${pinfold_shim_rest%%:*}
	pinfold_shim_rest=${pinfold_shim_rest#*:}
	case $pinfold_shim_e in
	"$pinfold_shim_dir" | "$pinfold_shim_dir/") continue ;;
	/*) [ "$pinfold_shim_e" -ef "$pinfold_shim_dir" ] 2>/dev/null && continue ;;
	esac
	PATH=${PATH:+$PATH:}$pinfold_shim_e
done
export PATH
unset pinfold_shim_dir pinfold_shim_rest pinfold_shim_e
`)
	b.WriteString("exec " + quote(pinfold) + " run -- " + quote(tool) + " \"$@\"\n")
	return b.Bytes()
}

// read returns the shim at path: ErrNotShim if it is not one (or not a
// regular file), or the error reading it.
func read(path string) (*Shim, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > 64<<10 {
		return nil, fmt.Errorf("%s: %w", path, ErrNotShim)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := strings.SplitN(string(b), "\n", 3)
	if len(lines) < 3 || lines[0] != "#!/bin/sh" || lines[1] != Marker {
		return nil, fmt.Errorf("%s: %w", path, ErrNotShim)
	}
	s := &Shim{Tool: filepath.Base(path), Path: path}
	for _, l := range strings.Split(lines[2], "\n") {
		if rest, ok := strings.CutPrefix(l, "exec '"); ok {
			if p, _, ok := strings.Cut(rest, "' run -- "); ok {
				s.Pinfold = strings.ReplaceAll(p, `'\''`, "'")
			}
		}
	}
	return s, nil
}

// Install writes a shim for each tool into dir (created if missing, mode
// 0755) that runs pinfold, an absolute path. It replaces shims already
// there (so they run this pinfold) and refuses, with ErrNotShim, to
// replace any other file; it returns the shims written before an error.
func Install(dir, pinfold string, tools []string) ([]Shim, error) {
	if !filepath.IsAbs(dir) || !filepath.IsAbs(pinfold) {
		return nil, fmt.Errorf("installing shims: %q and %q must be absolute paths", dir, pinfold)
	}
	for _, t := range tools {
		if err := ValidTool(t); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("installing shims: %w", err)
	}
	var done []Shim
	for _, t := range tools {
		path := filepath.Join(dir, t)
		if _, err := read(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return done, fmt.Errorf("installing shim %s: %w", t, err)
		}
		if err := writeAtomic(path, Script(dir, pinfold, t)); err != nil {
			return done, fmt.Errorf("installing shim %s: %w", t, err)
		}
		done = append(done, Shim{Tool: t, Path: path, Pinfold: pinfold})
	}
	return done, nil
}

// writeAtomic replaces path with an executable file holding data.
func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".shim-*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o755)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// List returns the shims in dir, sorted by tool; other files are
// skipped. A missing dir has no shims.
func List(dir string) ([]Shim, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing shims: %w", err)
	}
	var out []Shim
	for _, e := range ents {
		if ValidTool(e.Name()) != nil {
			continue
		}
		if s, err := read(filepath.Join(dir, e.Name())); err == nil {
			out = append(out, *s)
		}
	}
	return out, nil
}

// Uninstall removes the shims of tools from dir, or every shim when tools
// is empty, and returns the files it removed. It refuses (ErrNotShim) to
// remove a file that is not a shim, and reports ErrNoShim for a tool
// without one; it goes on with the other tools and returns the errors
// joined.
func Uninstall(dir string, tools []string) ([]string, error) {
	if len(tools) == 0 {
		shims, err := List(dir)
		if err != nil {
			return nil, err
		}
		for _, s := range shims {
			tools = append(tools, s.Tool)
		}
	}
	var removed []string
	var errs []error
	for _, t := range tools {
		if err := ValidTool(t); err != nil {
			errs = append(errs, err)
			continue
		}
		path := filepath.Join(dir, t)
		_, err := read(path)
		if errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("%s: %w in %s", t, ErrNoShim, dir))
			continue
		}
		if err == nil {
			err = os.Remove(path)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("removing shim %s: %w", t, err))
			continue
		}
		removed = append(removed, path)
	}
	return removed, errors.Join(errs...)
}

// OnPath reports whether the PATH value path has dir as an entry, and
// whether it is the first one.
func OnPath(path, dir string) (on, first bool) {
	for i, e := range filepath.SplitList(path) {
		if filepath.Clean(e) == filepath.Clean(dir) {
			return true, i == 0
		}
	}
	return false, false
}
