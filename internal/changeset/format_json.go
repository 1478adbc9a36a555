package changeset

// --name-status and --json: the entries listed, one line or one JSON
// object each.

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"io/fs"
	"strings"
	"unicode/utf8"

	"github.com/pinfold/pinfold/internal/config"
)

// WriteNameStatus writes one "X\tpath" line per file, X being A (added),
// M (modified), D (deleted) or, as git does, T for a type change.
func WriteNameStatus(w io.Writer, roots []Root, entries []Entry, o DiffOptions) error {
	bw := bufio.NewWriter(w)
	for _, i := range textEntries(entries, &o) {
		e := &entries[i]
		c := "M"
		switch {
		case e.Kind == Added:
			c = "A"
		case e.Kind == Deleted:
			c = "D"
		case e.TypeChanged():
			c = "T"
		}
		bw.WriteString(c + "\t" + quotePath(o.name(e)) + "\n")
	}
	return bw.Flush()
}

// jsonEntry is one element of WriteJSON's array.
type jsonEntry struct {
	Root       int    `json:"root"`
	Path       string `json:"path"`
	PathBase64 string `json:"path_base64,omitempty"`
	Status     Kind   `json:"status"`
	Type       string `json:"type"`
	OldType    string `json:"old_type,omitempty"`
	OldMode    string `json:"old_mode,omitempty"`
	NewMode    string `json:"new_mode,omitempty"`
	OldSize    *int64 `json:"old_size,omitempty"`
	NewSize    *int64 `json:"new_size,omitempty"`
	Binary     bool   `json:"binary"`
	Insertions int    `json:"insertions"`
	Deletions  int    `json:"deletions"`
	Symlink    string `json:"symlink,omitempty"`
	Opaque     bool   `json:"opaque,omitempty"`
	// SetIDStripped: new_mode is what apply writes; the changeset's
	// version had set-user-id or set-group-id bits, which it drops.
	SetIDStripped bool `json:"setid_stripped,omitempty"`
	// Policy is set on a config file discovery would find, or a file the
	// workspace's pre_run hooks name (see PolicyChanges): what it changes
	// in the policy later runs obey.
	Policy *config.PolicyDiff `json:"policy,omitempty"`
}

func typeName(st *Stat) string {
	switch m := st.Mode; {
	case m.IsRegular():
		return "file"
	case m.IsDir():
		return "dir"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	}
	return "other"
}

// WriteJSON writes the changes as one JSON array, directories included
// (with "type":"dir"). "path" is the path with the prefix of its root, as
// text (invalid UTF-8 replaced); "path_base64" holds the exact bytes when
// they are not valid UTF-8. "symlink" is the target of a symlink (the old
// one for a deleted symlink).
func WriteJSON(w io.Writer, roots []Root, entries []Entry, o DiffOptions) error {
	sel := newSelector(o.Paths, o.Exclude, o.Prefix)
	idx := make([]int, 0, len(entries))
	for i := range entries {
		if sel.match(&entries[i]) {
			idx = append(idx, i)
		}
	}
	res, err := results(context.Background(), roots, entries, idx, &o)
	if err != nil {
		return err
	}
	policy := map[string]PolicyChange{}
	for _, pc := range PolicyChanges(roots, entries, o.Paths, o.Prefix) {
		policy[pc.Path] = pc
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.WriteString("[")
	for n, i := range idx {
		e := &entries[i]
		r := &res[n]
		name := o.name(e)
		j := jsonEntry{Root: e.Root, Path: name, Status: e.Kind, Binary: r.binary, Insertions: r.ins, Deletions: r.del, Opaque: e.Opaque}
		if !utf8.ValidString(name) {
			j.Path = strings.ToValidUTF8(name, "\uFFFD")
			j.PathBase64 = base64.StdEncoding.EncodeToString([]byte(name))
		}
		cur := e.New
		if cur == nil {
			cur = e.Old
		}
		j.Type = typeName(cur)
		if e.Old != nil {
			j.OldMode = gitMode(e.Old)
			if !e.Old.Mode.IsDir() {
				j.OldSize = &e.Old.Size
			}
			if e.TypeChanged() {
				j.OldType = typeName(e.Old)
			}
		}
		if e.New != nil {
			st := *e.New
			st.Mode = AppliedMode(st.Mode)
			j.NewMode, j.SetIDStripped = gitMode(&st), Stripped(e.New.Mode)
			if !e.New.Mode.IsDir() {
				j.NewSize = &e.New.Size
			}
		}
		if cur.Mode&fs.ModeSymlink != 0 {
			j.Symlink = strings.ToValidUTF8(cur.Link, "\uFFFD")
		}
		if pc, ok := policy[name]; ok {
			j.Policy = &pc.PolicyDiff
		}
		b, err := json.Marshal(&j)
		if err != nil {
			return err
		}
		if n > 0 {
			bw.WriteString(",")
		}
		bw.WriteString("\n")
		bw.Write(b)
	}
	if len(idx) > 0 {
		bw.WriteString("\n")
	}
	bw.WriteString("]\n")
	return bw.Flush()
}
