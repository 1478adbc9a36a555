package config

import (
	"strconv"
	"strings"
	"unicode/utf8"

	suggestion "github.com/pinfold/pinfold/internal/suggest"
)

// Error is a problem in a config file, at a position. Its text names the
// file, line and column, shows the line with a caret under the column
// and, for an unknown key, the keys allowed there:
//
//	pinfold.yaml:12:5: unknown key "netwrok" in profile "install" (did you mean "network"?)
//	   12 |     netwrok: host
//	      |     ^
//	allowed keys: access, backend, base, ...
type Error struct {
	Path    string
	Pos     Pos    // zero when the problem is the whole file (it cannot be read)
	Msg     string // what is wrong, without the position
	Line    string // the text of line Pos.Line, when there is one
	Allowed []string
	Err     error // the cause, when the file could not be read
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Path)
	if e.Pos.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Pos.Line))
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Pos.Col))
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	if e.Pos.Line > 0 && strings.TrimSpace(e.Line) != "" {
		text, caret := snippet(e.Line, e.Pos.Col)
		num := strconv.Itoa(e.Pos.Line)
		width := max(len(num), 5)
		b.WriteByte('\n')
		b.WriteString(strings.Repeat(" ", width-len(num)))
		b.WriteString(num)
		b.WriteString(" | ")
		b.WriteString(text)
		b.WriteByte('\n')
		b.WriteString(strings.Repeat(" ", width))
		b.WriteString(" | ")
		b.WriteString(caret)
		b.WriteByte('^')
	}
	if len(e.Allowed) > 0 {
		b.WriteString("\nallowed keys: ")
		b.WriteString(strings.Join(e.Allowed, ", "))
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// snippet returns the part of line to show and the white space that puts
// a caret under column col (1-based, in characters). Tabs are kept so the
// caret lines up; long lines are cut around the column.
func snippet(line string, col int) (text, pad string) {
	const window = 60
	line = strings.TrimRight(line, " \t")
	runes := utf8.RuneCountInString(line)
	col = min(max(col, 1), runes+1)
	start, end := 0, runes
	prefix, suffix := "", ""
	if runes > 2*window {
		start = max(col-1-window, 0)
		end = min(start+2*window, runes)
		if start > 0 {
			prefix = "..."
		}
		if end < runes {
			suffix = "..."
		}
	}
	var t, c strings.Builder
	t.WriteString(prefix)
	c.WriteString(strings.Repeat(" ", len(prefix)))
	i := 0
	for _, r := range line {
		if i >= end {
			break
		}
		if i >= start {
			t.WriteRune(r)
			if i < col-1 {
				if r == '\t' {
					c.WriteByte('\t')
				} else {
					c.WriteByte(' ')
				}
			}
		}
		i++
	}
	t.WriteString(suffix)
	return t.String(), c.String()
}

// suggest returns the word of words closest to w, if it is close
// enough to be what was meant (at most two edits, or a different case).
func suggest(w string, words []string) string {
	best, bestD := "", 3
	lw := strings.ToLower(w)
	for _, c := range words {
		d := suggestion.Distance(lw, strings.ToLower(c))
		if d < bestD && d < max(len(c), 2) {
			best, bestD = c, d
		}
	}
	return best
}
