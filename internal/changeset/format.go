package changeset

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"io/fs"
	"strconv"
	"strings"
)

// DiffOptions chooses what the diff writers show.
type DiffOptions struct {
	// Paths limits the output to these paths and what is below them,
	// relative to the roots (or with the root's Prefix); empty means all.
	Paths []string
	// Exclude leaves out paths matching any of these globs, or below a
	// directory matching one; `*` crosses "/" ("node_modules/*", "*.log").
	Exclude []string
	// Context is the number of lines of context around changes: 0 means
	// 3, a negative number none.
	Context int
	// Prefix gives the path prefix shown for a root ("" for the
	// workspace, "captured/1/" for another root); nil shows none.
	Prefix func(root int) string
}

func (o *DiffOptions) context() int {
	switch {
	case o.Context == 0:
		return 3
	case o.Context < 0:
		return 0
	}
	return o.Context
}

func (o *DiffOptions) name(e *Entry) string {
	if o.Prefix == nil {
		return e.Path
	}
	return o.Prefix(e.Root) + e.Path
}

// textEntries lists the entries the text formats show: the selected ones
// that are not directories.
func textEntries(entries []Entry, o *DiffOptions) []int {
	sel := newSelector(o.Paths, o.Exclude, o.Prefix)
	idx := make([]int, 0, len(entries))
	for i := range entries {
		e := &entries[i]
		if (e.IsDir() && !e.TypeChanged()) || !sel.match(e) {
			continue
		}
		idx = append(idx, i)
	}
	return idx
}

// fileResult is what reading one entry's two versions found.
type fileResult struct {
	binary           bool
	ins, del         int
	oldSize, newSize int64
	patch            []byte
	err              error
}

// scratch is one worker's reusable memory.
type scratch struct {
	d        differ
	old, new []byte
	edits    []edit
	dirs     dirCache
	chunk    []byte // countLines's buffer
}

func (s *scratch) release() { s.dirs.release() }

// side is one version of a path, as the diff reads it.
type side struct {
	st     *Stat
	dir    string // where to read it: dir/rel
	rel    string
	data   []byte
	binary bool
	loaded bool // data holds the whole content
	// dropped is the changeset's own stat when st shows the applied mode
	// (set-id bits dropped).
	dropped *Stat
}

// hasContent tells whether a version has content worth diffing.
func hasContent(st *Stat) bool {
	return st != nil && (st.Mode.IsRegular() || st.Mode&fs.ModeSymlink != 0)
}

func (s *scratch) load(sd *side, buf *[]byte) error {
	st := sd.st
	if !hasContent(st) {
		sd.loaded = true
		return nil
	}
	if st.Mode&fs.ModeSymlink != 0 {
		*buf = append((*buf)[:0], st.Link...)
		sd.data, sd.loaded = *buf, true
		return nil
	}
	if st.Size > maxTextSize {
		sd.binary = true
		return nil
	}
	data, err := s.dirs.readFile(sd.dir, sd.rel, (*buf)[:0], maxTextSize+1, st.Size)
	*buf = data
	if err != nil {
		return err
	}
	if len(data) > maxTextSize {
		sd.binary = true
		return nil
	}
	sd.data, sd.loaded = data, true
	sd.binary = bytes.IndexByte(data[:min(len(data), binarySniff)], 0) >= 0
	return nil
}

// countLines counts the lines of one version as block would, reading a
// file through a fixed buffer; binary reports a file diff shows as binary.
func (s *scratch) countLines(sd *side) (n int, binary bool, err error) {
	st := sd.st
	switch {
	case !hasContent(st):
		return 0, false, nil
	case st.Mode&fs.ModeSymlink != 0:
		return countLines([]byte(st.Link)), false, nil
	case st.Size > maxTextSize:
		return 0, true, nil
	}
	if s.chunk == nil {
		s.chunk = make([]byte, 64<<10)
	}
	return s.dirs.countLines(sd.dir, sd.rel, s.chunk)
}

// diffEntry reads both versions of e and, when patch is set, writes the
// unified diff.
func (s *scratch) diffEntry(roots []Root, e *Entry, o *DiffOptions, patch bool) fileResult {
	var r fileResult
	var buf bytes.Buffer
	name := o.name(e)
	oldSide := side{st: e.Old, rel: e.Path}
	newSide := side{st: e.New, rel: e.Path}
	if e.New != nil && Stripped(e.New.Mode) {
		// The diff shows what apply writes: without set-id bits.
		st := *e.New
		st.Mode = AppliedMode(st.Mode)
		newSide.st, newSide.dropped = &st, e.New
	}
	if e.Root >= 0 && e.Root < len(roots) {
		oldSide.dir, newSide.dir = roots[e.Root].Lower, roots[e.Root].Upper
	}
	if e.Old != nil {
		r.oldSize = e.Old.Size
	}
	if e.New != nil {
		r.newSize = e.New.Size
	}
	if !patch && (e.Old == nil) != (e.New == nil) {
		// Only a count of lines: read in chunks, not whole.
		sd := &newSide
		if e.New == nil {
			sd = &oldSide
		}
		n, binary, err := s.countLines(sd)
		switch {
		case err != nil:
			r.err = err
		case binary:
			r.binary = true
		case e.New != nil:
			r.ins = n
		default:
			r.del = n
		}
		return r
	}
	if err := s.load(&oldSide, &s.old); err != nil {
		r.err = err
		return r
	}
	if err := s.load(&newSide, &s.new); err != nil {
		r.err = err
		return r
	}
	var w *bytes.Buffer
	if patch {
		w = &buf
	}
	if e.TypeChanged() {
		s.block(w, &r, name, &oldSide, &side{loaded: true}, o)
		s.block(w, &r, name, &side{loaded: true}, &newSide, o)
	} else {
		s.block(w, &r, name, &oldSide, &newSide, o)
	}
	if patch {
		r.patch = buf.Bytes()
	}
	return r
}

// block diffs two versions of one path (either may be absent) and
// writes a "diff --git" block to w when w is not nil.
func (s *scratch) block(w *bytes.Buffer, r *fileResult, name string, a, b *side, o *DiffOptions) {
	nameA, nameB := quotePath("a/"+name), quotePath("b/"+name)
	if w != nil {
		w.WriteString("diff --git ")
		w.WriteString(nameA)
		w.WriteByte(' ')
		w.WriteString(nameB)
		w.WriteByte('\n')
		if b.dropped != nil {
			// Not a git header line: git apply stops at it, as it should.
			w.WriteString("pinfold: the set-user-id/set-group-id bits of " + gitMode(b.dropped) + " are not applied\n")
		}
		switch {
		case a.st == nil:
			w.WriteString("new file mode " + gitMode(b.st) + "\n")
		case b.st == nil:
			w.WriteString("deleted file mode " + gitMode(a.st) + "\n")
		case gitMode(a.st) != gitMode(b.st):
			w.WriteString("old mode " + gitMode(a.st) + "\nnew mode " + gitMode(b.st) + "\n")
		}
	}
	if a.st == nil {
		nameA = "/dev/null"
	}
	if b.st == nil {
		nameB = "/dev/null"
	}
	if !hasContent(a.st) && !hasContent(b.st) {
		return
	}
	if a.binary || b.binary {
		if a.st != nil && b.st != nil && sameData(a, b) {
			return
		}
		r.binary = true
		if w != nil {
			w.WriteString("Binary files " + nameA + " and " + nameB + " differ\n")
		}
		return
	}
	// Both sides are text.
	switch {
	case len(a.data) == 0 && len(b.data) == 0:
		return
	case w == nil && len(a.data) == 0:
		r.ins += countLines(b.data)
		return
	case w == nil && len(b.data) == 0:
		r.del += countLines(a.data)
		return
	}
	s.edits = s.d.diff(a.data, b.data, s.edits)
	if len(s.edits) == 0 {
		return
	}
	for _, e := range s.edits {
		r.del += e.i1 - e.i0
		r.ins += e.j1 - e.j0
	}
	if w == nil {
		return
	}
	w.WriteString("--- " + nameA + "\n+++ " + nameB + "\n")
	writeHunks(w, &s.d.a, &s.d.b, s.edits, o.context())
}

// sameData tells whether two versions hold the same bytes, reading files
// too large to have been loaded.
func sameData(a, b *side) bool {
	if a.st.Size != b.st.Size || a.st.Mode.Type() != b.st.Mode.Type() {
		return false
	}
	if a.loaded && b.loaded {
		return bytes.Equal(a.data, b.data)
	}
	if !a.st.Mode.IsRegular() {
		return false
	}
	eq, err := sameContent(a.dir, a.rel, b.dir, b.rel, make([]byte, 64<<10), make([]byte, 64<<10))
	return err == nil && eq
}

// writeHunks writes the unified hunks of edits between a and b.
func writeHunks(w *bytes.Buffer, a, b *text, edits []edit, context int) {
	var num [64]byte
	rng := func(start, count int) {
		if count == 1 {
			w.Write(strconv.AppendInt(num[:0], int64(start+1), 10))
			return
		}
		if count == 0 {
			w.Write(strconv.AppendInt(num[:0], int64(start), 10))
		} else {
			w.Write(strconv.AppendInt(num[:0], int64(start+1), 10))
		}
		w.WriteByte(',')
		w.Write(strconv.AppendInt(num[:0], int64(count), 10))
	}
	line := func(c byte, l []byte) {
		w.WriteByte(c)
		w.Write(l)
		if len(l) == 0 || l[len(l)-1] != '\n' {
			w.WriteString("\n\\ No newline at end of file\n")
		}
	}
	for k := 0; k < len(edits); {
		g := k
		for g+1 < len(edits) && edits[g+1].i0-edits[g].i1 <= 2*context {
			g++
		}
		first, last := edits[k], edits[g]
		as := max(0, first.i0-context)
		bs := first.j0 - (first.i0 - as)
		ae := min(a.n(), last.i1+context)
		be := last.j1 + (ae - last.i1)
		w.WriteString("@@ -")
		rng(as, ae-as)
		w.WriteString(" +")
		rng(bs, be-bs)
		w.WriteString(" @@\n")
		i := as
		for _, e := range edits[k : g+1] {
			for ; i < e.i0; i++ {
				line(' ', a.line(i))
			}
			for ; i < e.i1; i++ {
				line('-', a.line(i))
			}
			for j := e.j0; j < e.j1; j++ {
				line('+', b.line(j))
			}
		}
		for ; i < ae; i++ {
			line(' ', a.line(i))
		}
		k = g + 1
	}
}

// gitMode is the mode git shows: the file type in git's octal form plus
// the permission bits.
func gitMode(st *Stat) string {
	if st == nil {
		return "000000"
	}
	var t uint32
	m := st.Mode
	switch {
	case m.IsDir():
		t = 0o040000
	case m&fs.ModeSymlink != 0:
		return "120000"
	case m&fs.ModeNamedPipe != 0:
		t = 0o010000
	case m&fs.ModeSocket != 0:
		t = 0o140000
	case m&fs.ModeCharDevice != 0:
		t = 0o020000
	case m&fs.ModeDevice != 0:
		t = 0o060000
	default:
		t = 0o100000
	}
	p := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		p |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		p |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		p |= 0o1000
	}
	s := strconv.FormatUint(uint64(t|p), 8)
	return strings.Repeat("0", max(0, 6-len(s))) + s
}

// quotePath quotes a path as git does when it holds control characters,
// a double quote, a backslash or bytes outside ASCII: in double quotes
// with C escapes and octal for other bytes.
func quotePath(s string) string {
	i := 0
	for i < len(s) && !needsQuote(s[i]) {
		i++
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteByte('"')
	for j := 0; j < len(s); j++ {
		c := s[j]
		if !needsQuote(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('\\')
		switch c {
		case '\a':
			b.WriteByte('a')
		case '\b':
			b.WriteByte('b')
		case '\t':
			b.WriteByte('t')
		case '\n':
			b.WriteByte('n')
		case '\v':
			b.WriteByte('v')
		case '\f':
			b.WriteByte('f')
		case '\r':
			b.WriteByte('r')
		case '"', '\\':
			b.WriteByte(c)
		default:
			b.WriteByte('0' + c>>6)
			b.WriteByte('0' + c>>3&7)
			b.WriteByte('0' + c&7)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func needsQuote(c byte) bool {
	return c < 0x20 || c == '"' || c == '\\' || c >= 0x7f
}

// WriteDiff writes the changes as a unified diff in git's format.
func WriteDiff(w io.Writer, roots []Root, entries []Entry, o DiffOptions) error {
	return writeDiff(context.Background(), w, roots, entries, &o)
}

func writeDiff(ctx context.Context, w io.Writer, roots []Root, entries []Entry, o *DiffOptions) error {
	idx := textEntries(entries, o)
	bw := bufio.NewWriterSize(w, 64<<10)
	err := runOrdered(ctx, len(idx), func(s *scratch, i int) fileResult {
		return s.diffEntry(roots, &entries[idx[i]], o, true)
	}, func(i int, r fileResult) error {
		if r.err != nil {
			return r.err
		}
		_, err := bw.Write(r.patch)
		return err
	})
	if err != nil {
		return err
	}
	return bw.Flush()
}

// results computes the counts of every listed entry.
func results(ctx context.Context, roots []Root, entries []Entry, idx []int, o *DiffOptions) ([]fileResult, error) {
	res := make([]fileResult, len(idx))
	err := runOrdered(ctx, len(idx), func(s *scratch, i int) fileResult {
		return s.diffEntry(roots, &entries[idx[i]], o, false)
	}, func(i int, r fileResult) error {
		res[i] = r
		return r.err
	})
	return res, err
}
