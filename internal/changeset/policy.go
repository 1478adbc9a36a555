package changeset

import (
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/pinfold/pinfold/internal/config"
)

// A changeset that adds, changes or removes a pinfold.yaml changes the
// policy of later runs: config discovery finds the file walking up from
// its directory or any below it, and the next run there executes its
// pre_run hooks on the host. So does one that changes a file those hooks
// name (./scripts/check.sh): they run in the workspace. A sandbox must
// not be able to slip either in with its other writes, so the changes are
// named in diff and refused by apply unless the caller asks for them
// (engine.ApplyRequest.Policy).

// PolicyChange is a changed config file that discovery would find, or a
// changed file that the workspace's pre_run hooks name (Problem says
// which hook).
type PolicyChange struct {
	Path string `json:"path"` // as diff names it (with a captured root's prefix)
	Kind Kind   `json:"status"`
	config.PolicyDiff
}

// maxPolicySize bounds the versions read: a policy file is a few
// kilobytes, and config.Load refuses more than 1 MiB.
const maxPolicySize = 1 << 20

// IsPolicyFile tells whether an entry is a file config discovery finds.
func IsPolicyFile(e *Entry) bool { return path.Base(e.Path) == config.FileName }

// PolicyChanges lists the changes of entries (those that paths select,
// as ApplyOptions.Paths does; all when empty) to config files, and to
// files the hooks of the policy in effect for the first root name. Both
// versions are read without following any symbolic link; a version that
// is a link or cannot be read makes the change's Problem.
func PolicyChanges(roots []Root, entries []Entry, paths []string, prefix func(int) string) []PolicyChange {
	sel := newSelector(paths, nil, prefix)
	var out []PolicyChange
	for i := range entries {
		e := &entries[i]
		if !IsPolicyFile(e) || !sel.match(e) {
			continue
		}
		name := e.Path
		if prefix != nil {
			name = prefix(e.Root) + e.Path
		}
		out = append(out, policyChange(roots, e, name))
	}
	// The hooks of the workspace's policy run in the workspace: a file
	// they name (./check.sh, scripts/x) is host code too.
	if hooks, cfg := hookFiles(roots); len(hooks) > 0 {
		files := slices.Sorted(maps.Keys(hooks)) // one message, whatever the map's order
		for i := range entries {
			e := &entries[i]
			if e.Root != 0 || IsPolicyFile(e) || e.IsDir() || !sel.match(e) {
				continue
			}
			for _, f := range files {
				if h := hooks[f]; e.Path == f || under(e.Path, f) {
					name := e.Path
					if prefix != nil {
						name = prefix(e.Root) + e.Path
					}
					out = append(out, PolicyChange{Path: name, Kind: e.Kind, PolicyDiff: config.PolicyDiff{
						Problem: "the pre_run hook " + strconv.Quote(h) + " of " + cfg + " runs it on the host"}})
					break
				}
			}
		}
	}
	return out
}

// hookFiles are the workspace-relative paths the hooks of the workspace's
// policy (the pinfold.yaml a run there would obey) name, each with its
// hook, and that file. A word of a hook names a path when it is not an
// option, a variable or an absolute path; only paths the changeset changes
// matter, so a word that is no path costs nothing.
func hookFiles(roots []Root) (map[string]string, string) {
	if len(roots) == 0 {
		return nil, ""
	}
	p, err := config.Find(roots[0].Lower)
	if err != nil || p == "" {
		return nil, ""
	}
	f, err := config.LoadDiscovered(p)
	if err != nil {
		return nil, ""
	}
	files := map[string]string{}
	add := func(hs []config.Hook) {
		for _, h := range hs {
			words := h.Args
			if words == nil {
				words = strings.FieldsFunc(h.Shell, func(r rune) bool {
					return strings.ContainsRune(" \t\n;|&<>()`'\"=", r)
				})
			}
			for _, w := range words {
				w = path.Clean(w)
				if w == "." || w == ".." || strings.HasPrefix(w, "../") || strings.HasPrefix(w, "-") ||
					strings.HasPrefix(w, "/") || strings.ContainsAny(w, "$*?[~") {
					continue
				}
				files[w] = config.HookText(h)
			}
		}
	}
	add(f.Settings.PreRun)
	for _, pr := range f.Profiles {
		add(pr.Settings.PreRun)
	}
	return files, p
}

func policyChange(roots []Root, e *Entry, name string) PolicyChange {
	var problems []string
	version := func(root string, st *Stat, which string) (b []byte, ok bool) {
		if st == nil {
			return nil, true
		}
		switch {
		case st.Mode&fs.ModeSymlink != 0:
			problems = append(problems, fmt.Sprintf("the %s version is a symbolic link to %q", which, st.Link))
		case !st.Mode.IsRegular():
			problems = append(problems, "the "+which+" version is not a regular file")
		default:
			b, err := readBeneath(root, e.Path, maxPolicySize)
			if err == nil {
				return b, true
			}
			problems = append(problems, "the "+which+" version cannot be read: "+err.Error())
		}
		return nil, false
	}
	r := roots[e.Root]
	old, oldOK := version(r.Lower, e.Old, "old")
	cur, curOK := version(r.Upper, e.New, "new")
	c := PolicyChange{Path: name, Kind: e.Kind}
	switch {
	case oldOK && curOK:
		c.PolicyDiff = config.ComparePolicy(name, old, cur)
	case curOK && cur != nil:
		// The old version unknown: every hook of the new one is new.
		c.PolicyDiff = config.ComparePolicy(name, nil, cur)
		c.Keys = nil
	}
	if len(problems) > 0 {
		if c.Problem != "" {
			problems = append(problems, c.Problem)
		}
		c.Problem = strings.Join(problems, "; ")
	}
	return c
}

// String is the change as one line: the file, what happened, the hooks
// it adds and the settings it changes.
func (c *PolicyChange) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s)", c.Path, c.Kind)
	if c.Problem != "" {
		b.WriteString(": " + c.Problem)
	}
	if len(c.Hooks) > 0 {
		b.WriteString("; host hooks it adds: " + strings.Join(c.Hooks, "; "))
	}
	if len(c.Keys) > 0 {
		b.WriteString("; settings it changes: " + strings.Join(c.Keys, ", "))
	}
	return b.String()
}
