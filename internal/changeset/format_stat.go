package changeset

// --stat: a diffstat of the entries, as git writes one.

import (
	"bufio"
	"io"
	"strconv"
	"unicode/utf8"
)

// WriteStat writes git's --stat: one " path | N ++--" line per file and
// a summary line.
func WriteStat(w io.Writer, roots []Root, entries []Entry, o DiffOptions) error {
	idx := textEntries(entries, &o)
	res, err := statResults(roots, entries, idx, &o)
	if err != nil {
		return err
	}
	if len(idx) == 0 {
		return nil
	}
	names := make([]string, len(idx))
	nameW, maxChange, anyBin := 0, 0, false
	ins, del := 0, 0
	for i, k := range idx {
		names[i] = quotePath(o.name(&entries[k]))
		nameW = max(nameW, width(names[i]))
		r := &res[i]
		if r.binary {
			anyBin = true
			continue
		}
		maxChange = max(maxChange, r.ins+r.del)
		ins += r.ins
		del += r.del
	}
	const total = 80
	numW := len(strconv.Itoa(maxChange))
	if anyBin && numW < 3 {
		numW = 3
	}
	graphW := maxChange
	if nameW+numW+6+graphW > total {
		g := max(6, total*3/8-numW-6)
		graphW = min(graphW, g)
		if nameW > total-numW-6-graphW {
			nameW = max(total-numW-6-graphW, 4)
		} else {
			graphW = total - numW - 6 - nameW
		}
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	var line []byte
	for i := range idx {
		r := &res[i]
		line = append(line[:0], ' ')
		line = appendName(line, names[i], nameW)
		line = append(line, " | "...)
		if r.binary {
			line = appendPad(line, "Bin", numW)
			line = append(line, ' ')
			line = strconv.AppendInt(line, r.oldSize, 10)
			line = append(line, " -> "...)
			line = strconv.AppendInt(line, r.newSize, 10)
			line = append(line, " bytes\n"...)
			bw.Write(line)
			continue
		}
		line = appendPad(line, strconv.Itoa(r.ins+r.del), numW)
		a, d := scaleChange(r.ins, r.del, maxChange, graphW)
		if a+d > 0 {
			line = append(line, ' ')
			for range a {
				line = append(line, '+')
			}
			for range d {
				line = append(line, '-')
			}
		}
		line = append(line, '\n')
		bw.Write(line)
	}
	bw.WriteString(statSummary(len(idx), ins, del))
	return bw.Flush()
}

// width is the number of columns a name takes (runes, for valid UTF-8).
func width(s string) int {
	if utf8.ValidString(s) {
		return utf8.RuneCountInString(s)
	}
	return len(s)
}

// appendName pads name to w columns, or cuts its start to "..." when longer.
func appendName(b []byte, name string, w int) []byte {
	n := width(name)
	if n <= w {
		b = append(b, name...)
		for ; n < w; n++ {
			b = append(b, ' ')
		}
		return b
	}
	// Keep the end of the name.
	cut := n - (w - 3)
	i := 0
	for cut > 0 && i < len(name) {
		_, size := utf8.DecodeRuneInString(name[i:])
		if !utf8.ValidString(name) {
			size = 1
		}
		i += size
		cut--
	}
	b = append(b, "..."...)
	return append(b, name[i:]...)
}

func appendPad(b []byte, s string, w int) []byte {
	for n := len(s); n < w; n++ {
		b = append(b, ' ')
	}
	return append(b, s...)
}

// scaleChange fits ins + del into width columns when maxChange does not fit.
func scaleChange(ins, del, maxChange, width int) (int, int) {
	if maxChange <= width {
		return ins, del
	}
	scale := func(n int) int {
		if n == 0 {
			return 0
		}
		return 1 + n*(width-1)/maxChange
	}
	t := scale(ins + del)
	if t < 2 && ins > 0 && del > 0 {
		t = 2
	}
	if ins < del {
		a := scale(ins)
		return a, t - a
	}
	d := scale(del)
	return t - d, d
}

func statSummary(files, ins, del int) string {
	plural := func(n int, one, many string) string {
		if n == 1 {
			return strconv.Itoa(n) + one
		}
		return strconv.Itoa(n) + many
	}
	s := " " + plural(files, " file changed", " files changed")
	if ins > 0 || del == 0 {
		s += ", " + plural(ins, " insertion(+)", " insertions(+)")
	}
	if del > 0 || ins == 0 {
		s += ", " + plural(del, " deletion(-)", " deletions(-)")
	}
	return s + "\n"
}
