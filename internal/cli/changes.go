package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pinfold/pinfold/internal/agent"
	"github.com/pinfold/pinfold/internal/changeset"
	"github.com/pinfold/pinfold/internal/config"
	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/store"
	"github.com/pinfold/pinfold/internal/terminal"
)

// recovered returns the CLI's engine once what killed runs left half done
// is finished (see engine.Recover).
func recovered(ctx context.Context, io *IO) (*engine.Engine, error) {
	if _, err := storeDir(); err != nil {
		return nil, err
	}
	eng := engineFor(io)
	return eng, eng.Recover(ctx)
}

// storeDir is pinfold's store, for changesets.
func storeDir() (string, error) {
	d, err := store.DefaultDir()
	if err != nil {
		return "", fault.New(fault.Store, "cannot find pinfold's store", err.Error(), "set PINFOLD_STORE", err)
	}
	return d, nil
}

// changesetAndPaths splits [ID] [PATHS...] and opens the changeset: the
// one ID names, or the newest open one of the workspace. The first
// argument is an ID when it is hex and a unique prefix of a changeset's
// id, unless it is shorter than 4 characters and names a file here (then
// it is a path). A hex argument that names no changeset is taken as a
// path too, and returned as guess: checkPaths then refuses it with PF180
// when it names nothing in the changeset either, so that a mistyped id is
// never a silent no-op. An ambiguous prefix is refused, naming the
// candidates.
func changesetAndPaths(eng *engine.Engine, args []string) (cs *changeset.Changeset, paths []string, guess string, err error) {
	if len(args) > 0 && isHexPrefix(args[0]) {
		arg := args[0]
		_, lerr := os.Lstat(arg)
		isPath := lerr == nil
		cs, err := changeset.Open(eng.Store, arg)
		switch {
		case err == nil && (len(arg) >= 4 || !isPath):
			return cs, args[1:], "", nil
		case errors.Is(err, changeset.ErrAmbiguous) && !isPath:
			return nil, nil, "", fault.New(fault.NoChangeset, "changeset id "+strconv.Quote(arg)+" is ambiguous",
				err.Error(), "give more of the id (pinfold changes lists them)", err)
		case err != nil && !errors.Is(err, changeset.ErrNotFound) && !errors.Is(err, changeset.ErrAmbiguous):
			return nil, nil, "", fault.New(fault.Store, "cannot read changeset "+arg, err.Error(), "", err)
		}
		if !isPath {
			guess = arg
		}
	}
	cs, err = eng.OpenChangeset("", currentWorkspace())
	if err != nil && guess != "" {
		return nil, nil, "", fault.New(fault.NoChangeset, "no changeset "+guess,
			"no changeset's id starts with "+strconv.Quote(guess)+", and this workspace has no open changeset in which it could be a path",
			"list them with pinfold changes --all", err)
	}
	return cs, args, guess, err
}

// checkPaths refuses PATHS that match nothing in the changeset: a
// mistyped path (or id) must not be a silent no-op. rel are paths made
// relative to the changeset's root (relPaths); guess is a first argument
// that looked like an id but named no changeset.
func checkPaths(cs *changeset.Changeset, entries []changeset.Entry, paths, rel []string, guess string, prefix func(int) string) error {
	missing := changeset.Unmatched(entries, rel, prefix)
	if len(missing) == 0 {
		return nil
	}
	var shown []string
	for i, p := range rel {
		if slices.Contains(missing, p) {
			if i == 0 && guess != "" {
				return fault.New(fault.NoChangeset, "no changeset "+guess,
					"no changeset's id starts with "+strconv.Quote(guess)+", and changeset "+cs.Meta.ID+
						" (the newest open one of this workspace) changes no path "+strconv.Quote(guess),
					"list them with pinfold changes --all; give more of the id", nil)
			}
			shown = append(shown, paths[i])
		}
	}
	return fault.New(fault.NoPath, "changeset "+cs.Meta.ID+" changes nothing at "+strings.Join(shown, ", "),
		"a path must name a changed file or a directory holding one (as pinfold diff --name-status "+cs.Meta.ID+" lists them)",
		"check the path, or name the changeset: pinfold diff ID PATHS...", nil)
}

func isHexPrefix(s string) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func currentWorkspace() string {
	cwd, _ := os.Getwd()
	if real, err := filepath.EvalSymlinks(cwd); err == nil {
		cwd = real
	}
	// The workspace is where pinfold.yaml is, else the current directory.
	if cfg, err := findConfig(cwd); err == nil && cfg != "" {
		return filepath.Dir(cfg)
	}
	return cwd
}

// relPaths makes PATHS relative to the changeset's first root.
func relPaths(cs *changeset.Changeset, paths []string) []string {
	if len(paths) == 0 || len(cs.Meta.Roots) == 0 {
		return paths
	}
	cwd, _ := os.Getwd()
	if real, err := filepath.EvalSymlinks(cwd); err == nil {
		cwd = real
	}
	root := cs.Meta.Roots[0].Path
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		abs := p
		if !filepath.IsAbs(abs) {
			abs = filepath.Join(cwd, p)
		}
		if rel, err := filepath.Rel(root, abs); err == nil && !strings.HasPrefix(rel, "..") {
			p = rel
		}
		out = append(out, filepath.ToSlash(p))
	}
	return out
}

func changesCommand() command {
	return command{name: "changes", summary: "list changesets", use: "changes [--all] [--json]", interspersed: true,
		long: `Lists the changesets of this workspace (newest first): id, status, when, what they
change, and the command that made them.`,
		setup: func(fs *flagSet) runner {
			var all, asJSON bool
			fs.Bool(&all, "all", 'a', "list the changesets of every workspace")
			fs.Bool(&asJSON, "json", 0, "print JSON")
			return func(ctx context.Context, io *IO, rest []string) int {
				engine.UseAllCPUs()
				if len(rest) > 0 {
					return fail(io, fs.errorf("pinfold changes takes no arguments"))
				}
				eng, err := recovered(ctx, io)
				if err != nil {
					return fail(io, err)
				}
				list, err := changeset.List(eng.Store)
				if err != nil {
					return fail(io, fault.New(fault.Store, "cannot list changesets", err.Error(), "", err))
				}
				ws := currentWorkspace()
				type row struct {
					ID        string   `json:"id"`
					Status    string   `json:"status"`
					Created   string   `json:"created"`
					Workspace string   `json:"workspace"`
					Roots     []string `json:"roots"`
					Command   []string `json:"command"`
					Added     int      `json:"added"`
					Modified  int      `json:"modified"`
					Deleted   int      `json:"deleted"`
					ExitCode  int      `json:"exit_code"`
				}
				rows := []row{}
				for _, cs := range list {
					if !all && cs.Meta.Workspace != ws {
						continue
					}
					r := row{ID: cs.Meta.ID, Status: cs.Meta.Status, Created: cs.Meta.Created.Format(time.RFC3339),
						Workspace: cs.Meta.Workspace, Command: cs.Meta.Command, ExitCode: cs.Meta.ExitCode}
					if r.Status == "running" {
						if unlock, err := cs.Lock(); err == nil {
							unlock()
							r.Status = "interrupted"
						}
					}
					for _, mr := range cs.Meta.Roots {
						r.Roots = append(r.Roots, mr.Path)
					}
					if n := cs.Meta.Counts; n != nil && r.Status == changeset.StatusOpen {
						r.Added, r.Modified, r.Deleted = n.Added, n.Modified, n.Deleted
					} else if entries, err := changeset.Scan(ctx, cs.Roots()); err == nil {
						// Counted as of now: an interrupted run recorded none.
						n := changeset.Count(entries)
						r.Added, r.Modified, r.Deleted = n.Added, n.Modified, n.Deleted
					}
					rows = append(rows, r)
				}
				if listed(io, asJSON, rows, len(rows), "no changesets") {
					return 0
				}
				var sessions map[string]string
				fmt.Fprintf(io.Stdout, "%-12s  %-11s  %-16s  %-17s  %-20s  %s\n", "ID", "STATUS", "CREATED", "CHANGES", "ROOTS", "COMMAND")
				for _, r := range rows {
					changes := fmt.Sprintf("+%d ~%d -%d", r.Added, r.Modified, r.Deleted)
					// Roots: "." for the workspace listed, paths for the rest.
					roots := make([]string, len(r.Roots))
					for i, p := range r.Roots {
						roots[i] = p
						if p == ws && !all {
							roots[i] = "."
						}
					}
					command := quoteCmd(r.Command)
					if len(r.Command) > 1 && r.Command[1] == agent.AgentCommand {
						if sessions == nil {
							sessions = sessionNames() // read once, if any row needs it
						}
						command = sessions[r.ID] // not the agent that ran in it
						if command == "" {
							command = "a session"
						}
					}
					fmt.Fprintf(io.Stdout, "%-12s  %-11s  %-16s  %-17s  %-20s  %s\n", r.ID, r.Status, ago(r.Created), changes,
						strings.Join(roots, ","), command)
				}
				return 0
			}
		}}
}

// sessionNames names the sessions by their changesets' ids, for the
// changes table.
func sessionNames() map[string]string {
	st, _, err := sessionStore()
	if err != nil {
		return nil
	}
	list, _ := st.List("")
	names := make(map[string]string, len(list))
	for _, r := range list {
		if r.Changeset == "" {
			continue
		}
		names[r.Changeset] = "session " + r.ID
		if r.Name != "" {
			names[r.Changeset] = "session " + r.Name + " (" + r.ID + ")"
		}
	}
	return names
}

// listed prints a list as JSON (v), or says none when it is empty (n
// items); it reports whether that was all there was to print.
func listed(io *IO, asJSON bool, v any, n int, none string) bool {
	if asJSON {
		b, _ := json.MarshalIndent(v, "", "  ")
		io.Stdout.Write(append(b, '\n'))
		return true
	}
	if n == 0 {
		fmt.Fprintln(io.Stdout, none)
		return true
	}
	return false
}

func ago(ts string) string {
	t, err := time.Parse(time.RFC3339, ts)
	if err != nil {
		return ts
	}
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%d min ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h ago", int(d.Hours()))
	}
	return t.Format("2006-01-02 15:04")
}

func quoteCmd(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		switch {
		case strings.ContainsFunc(a, func(r rune) bool { return r < 0x20 || r == 0x7f }):
			// A newline or escape would break the table (or drive the
			// terminal): bash's $'...' keeps it one line and still valid.
			a = ansiQuote(a)
		case a == "" || strings.ContainsAny(a, " '\"\\$`|&;<>()*?"):
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

// ansiQuote quotes s as $'...', with control bytes escaped.
func ansiQuote(s string) string {
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\'' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

func diffCommand() command {
	return command{name: "diff", complete: changesetIDs, summary: "show what a changeset changes", use: "diff [ID] [flags] [--] [PATHS...]", interspersed: true,
		long: `Shows what a changeset (default: the newest open one of this workspace) would change,
as a git-style unified diff: binary files marked, mode changes, symlinks, deletions.`,
		setup: func(fs *flagSet) runner {
			var stat, nameStatus, asJSON bool
			var exclude []string
			fs.Bool(&stat, "stat", 0, "a summary per file")
			fs.Bool(&nameStatus, "name-status", 0, "one line per file: A, M or D and the path")
			fs.Bool(&asJSON, "json", 0, "print JSON")
			fs.List(&exclude, "exclude", 'x', "GLOB", "leave out paths matching GLOB (repeatable; * crosses /)")
			return func(ctx context.Context, io *IO, rest []string) int {
				engine.UseAllCPUs()
				eng, err := recovered(ctx, io)
				if err != nil {
					return fail(io, err)
				}
				cs, paths, guess, err := changesetAndPaths(eng, rest)
				if err != nil {
					return fail(io, err)
				}
				roots := cs.Roots()
				entries, err := changeset.Scan(ctx, roots)
				if err != nil {
					return fail(io, fault.New(fault.Store, "cannot read changeset "+cs.Meta.ID, err.Error(), "", err))
				}
				rel := relPaths(cs, paths)
				if err := checkPaths(cs, entries, paths, rel, guess, cs.Prefix); err != nil {
					return fail(io, err)
				}
				printPolicyChanges(io, changeset.PolicyChanges(roots, entries, rel, cs.Prefix), false)
				o := changeset.DiffOptions{Paths: rel, Exclude: exclude, Prefix: cs.Prefix}
				switch {
				case asJSON:
					err = changeset.WriteJSON(io.Stdout, roots, entries, o)
				case stat:
					err = changeset.WriteStat(io.Stdout, roots, entries, o)
				case nameStatus:
					err = changeset.WriteNameStatus(io.Stdout, roots, entries, o)
				default:
					err = changeset.WriteDiff(io.Stdout, roots, entries, o)
				}
				if err != nil {
					return fail(io, fault.New(fault.Store, "cannot show changeset "+cs.Meta.ID, err.Error(), "", err))
				}
				return 0
			}
		}}
}

func applyCommand() command {
	return command{name: "apply", complete: changesetIDs, summary: "write a changeset into the workspace", use: "apply [ID] [flags] [--] [PATHS...]", interspersed: true,
		long: `Writes a changeset (default: the newest open one of this workspace) into the
workspace, file by file and journaled. Refuses when an original changed since the
run, listing the conflicts. With PATHS, applies only those; the changeset stays open.`,
		setup: func(fs *flagSet) runner {
			var force, policy bool
			fs.Bool(&force, "force", 'f', "apply even where the originals changed since the run")
			fs.Bool(&policy, "policy", 0, "accept changes to pinfold.yaml (later runs obey it and run its pre_run hooks on the host)")
			return func(ctx context.Context, io *IO, rest []string) int {
				engine.UseAllCPUs()
				eng, err := recovered(ctx, io)
				if err != nil {
					return fail(io, err)
				}
				cs, paths, guess, err := changesetAndPaths(eng, rest)
				if err != nil {
					return fail(io, err)
				}
				rel := relPaths(cs, paths)
				check := func(cs *changeset.Changeset) error {
					if len(rel) == 0 && !policy {
						return nil
					}
					// Checked first: a path that matches nothing applies nothing.
					entries, err := changeset.Scan(ctx, cs.Roots())
					if err != nil {
						return fault.New(fault.Store, "cannot read changeset "+cs.Meta.ID, err.Error(), "", err)
					}
					if err := checkPaths(cs, entries, paths, rel, guess, cs.Prefix); err != nil {
						return err
					}
					if policy {
						printPolicyChanges(io, changeset.PolicyChanges(cs.Roots(), entries, rel, cs.Prefix), true)
					}
					return nil
				}
				res, err := eng.ApplyChangeset(ctx, cs.Meta.ID, engine.ApplyRequest{Paths: rel, Force: force, Policy: policy}, check)
				if err != nil {
					return fail(io, err)
				}
				c := res.Counts
				fmt.Fprintf(io.Stderr, "pinfold: applied changeset %s: %d added, %d modified, %d deleted\n", cs.Meta.ID, c.Added, c.Modified, c.Deleted)
				printStripped(io, res.Stripped)
				return 0
			}
		}}
}

func discardCommand() command {
	return command{name: "discard", complete: changesetIDs, summary: "throw a changeset away", use: "discard [ID]", interspersed: true,
		long: `Throws a changeset away (default: the newest of this workspace that is open, or
interrupted: left by a run that was killed).`,
		setup: func(fs *flagSet) runner {

			return func(ctx context.Context, io *IO, rest []string) int {
				if len(rest) > 1 {
					return fail(io, fs.errorf("pinfold discard takes one changeset id"))
				}
				eng, err := recovered(ctx, io)
				if err != nil {
					return fail(io, err)
				}
				id := ""
				if len(rest) == 1 {
					id = rest[0]
				}
				cs, err := eng.OpenToDiscard(id, currentWorkspace())
				if err != nil {
					return fail(io, err)
				}
				d, err := eng.DiscardChangeset(ctx, cs.Meta.ID)
				if err != nil {
					return fail(io, err)
				}
				note := ""
				if d.Interrupted {
					note = " (interrupted: its run was killed before it finished)"
				}
				if d.PartlyApplied {
					note = " (its apply had started: the workspace holds part of it, each file whole)"
				}
				fmt.Fprintf(io.Stderr, "pinfold: discarded changeset %s%s\n", cs.Meta.ID, note)
				return 0
			}
		}}
}

func exportCommand() command {
	return command{name: "export", complete: changesetIDs, summary: "write a changeset as an OCI layer", use: "export [ID] [-o FILE]", interspersed: true,
		long: `Writes a changeset as an OCI image layer (an uncompressed tar with whiteouts for
deletions), paths from the root of the filesystem.`,
		setup: func(fs *flagSet) runner {
			var out string
			fs.String(&out, "output", 'o', "FILE", "write the layer to FILE (default: standard output)")
			return func(ctx context.Context, io *IO, rest []string) int {
				engine.UseAllCPUs()
				if len(rest) > 1 {
					return fail(io, fs.errorf("pinfold export takes one changeset id"))
				}
				if _, err := storeDir(); err != nil {
					return fail(io, err)
				}
				eng := engineFor(io)
				id := ""
				if len(rest) == 1 {
					id = rest[0]
				}
				cs, err := eng.OpenChangeset(id, currentWorkspace())
				if err != nil {
					return fail(io, err)
				}
				roots := cs.Roots()
				entries, err := changeset.Scan(ctx, roots)
				if err != nil {
					return fail(io, fault.New(fault.Store, "cannot read changeset "+cs.Meta.ID, err.Error(), "", err))
				}
				w := io.Stdout
				if out == "-" {
					out = "" // standard output, as tar -f - has it
				}
				if out == "" && terminal.Is(io.Stdout) {
					return fail(io, fault.New(fault.Usage, "pinfold export writes a tar, and standard output is a terminal",
						"", "pass -o FILE, or redirect the output (pinfold export > layer.tar)", nil))
				}
				if out != "" {
					f, err := os.Create(out)
					if err != nil {
						return fail(io, fault.New(fault.BadValue, "cannot write "+out, err.Error(), "", err))
					}
					defer f.Close()
					w = f
				}
				if err := changeset.Export(w, roots, entries); err != nil {
					return fail(io, fault.New(fault.Store, "cannot export changeset "+cs.Meta.ID, err.Error(), "", err))
				}
				return 0
			}
		}}
}

func findConfig(dir string) (string, error) { return config.Find(dir) }

// printPolicyChanges says on stderr, before a diff or an apply, that the
// changeset changes pinfold.yaml files, and how.
func printPolicyChanges(io *IO, pc []changeset.PolicyChange, applying bool) {
	if len(pc) == 0 {
		return
	}
	head := "this changeset changes pinfold.yaml (or a file its pre_run hooks run), the policy later runs obey on the host:"
	if applying {
		head = "warning: applying changes to pinfold.yaml (or a file its pre_run hooks run) (--policy); later runs obey them on the host:"
	}
	fmt.Fprintf(io.Stderr, "pinfold: %s\n", head)
	for i := range pc {
		fmt.Fprintf(io.Stderr, "  %s\n", pc[i].String())
	}
	if !applying {
		fmt.Fprintf(io.Stderr, "  pinfold apply refuses it without --policy\n")
	}
}

// changesetIDs are the open changesets' ids, for completion.
func changesetIDs() []string {
	dir, err := storeDir()
	if err != nil {
		return nil
	}
	list, _ := changeset.List(dir)
	var ids []string
	for _, cs := range list {
		if cs.Meta.Status == changeset.StatusOpen {
			ids = append(ids, cs.Meta.ID)
		}
	}
	return ids
}
